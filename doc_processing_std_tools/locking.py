"""The one process-wide write lock, plus an OS file lock for stores shared between processes.

Guarantee (documented in docs/guarantees.md):

* In one process, every tool that changes state, in every mounted server, runs
  while holding :data:`PROCESS_LOCK`, from its checks to the end of its change.
  Overlapping calls therefore behave as if they ran one after the other.
* A store on disk (the memory directory, each writable filesystem root) is also
  guarded by ``flock`` on the folder itself, taken after the process lock, so two
  *processes* on the same folder serialize their changes too. A marker tells writers
  of other servers to take that lock as well (:func:`locked_folders`): a ``.dpt.lock``
  file in a memory folder (the server's own folder, which ignores itself for git), and,
  for a filesystem root (the user's project), an entry named by the folder's identity
  in a per-user folder (:func:`register`), so nothing is added to the project.
  ``flock`` is advisory: it protects against other users of this module, not against
  an unrelated program writing into the folder.

:data:`PROCESS_LOCK` is a :class:`ProcessLock`: worker threads take it with ``with``
(fastmcp runs sync tools in AnyIO worker threads); async code uses :func:`hold_async`,
which waits on the event loop itself. Waiters of both kinds queue in one FIFO, so
neither starves the other, and an async wait never occupies a worker thread (the
pool is small: 40 threads waiting for the lock would leave none for its holder).
Calls of servers that take the lock themselves, around their disk work only, are let
in by :func:`admit_self_locking`, at most half the pool at once, for the same reason.
Every wait for the lock on behalf of a call is reported to that call's telemetry record
(:func:`.telemetry.lock_waited`: ``dpt_lock_wait_seconds``).
"""

from __future__ import annotations

import asyncio
import contextvars
import fcntl
import os
import stat
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from . import APP_NAME
from .telemetry import lock_waited


class _ThreadWaiter:
    def __init__(self) -> None:
        self._event = threading.Event()

    def wake(self) -> None:
        self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


class _LoopWaiter:
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future[None] = self.loop.create_future()

    def wake(self) -> None:
        # Any thread may release the lock; the future belongs to its loop.
        self.loop.call_soon_threadsafe(self._resolve)

    def _resolve(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


def _withdraw(
    state: threading.Lock,
    waiters: deque[Any],
    waiter: _ThreadWaiter | _LoopWaiter,
    *,
    give_back: Callable[[], None],
) -> None:
    """A cancelled wait leaves the queue; what was handed over just as it was cancelled
    (the lock, a place at the gate) goes back, to the next waiter."""
    with state:
        queued = waiter in waiters
        if queued:
            waiters.remove(waiter)
    if not queued:
        give_back()


class ProcessLock:
    """A non-reentrant lock shared by worker threads and the event loop, first come first served.

    ``release`` hands the lock straight to the oldest waiter, so a waiter woken late
    (an event loop that is busy) keeps its turn and cannot be overtaken.
    """

    def __init__(self) -> None:
        self._state = threading.Lock()  # guards the two fields below, held for microseconds
        self._held = False
        self._waiters: deque[_ThreadWaiter | _LoopWaiter] = deque()
        self.owner: object | None = None  # set by hold_async: the call that holds the lock
        self.fleet: Any = None  # the fleet lock a worker thread's holder took with it

    def locked(self) -> bool:
        return self._held

    def waiting(self) -> int:
        """How many threads and tasks wait for the lock (what a test waits on, not a sleep)."""
        with self._state:
            return len(self._waiters)

    def _take_or_queue(self, make_waiter: Callable[[], _ThreadWaiter | _LoopWaiter]) -> Any:
        """None when taken at once, else the queued waiter to wait on."""
        with self._state:
            if not self._held:
                self._held = True
                return None
            waiter = make_waiter()
            self._waiters.append(waiter)
            return waiter

    def try_acquire(self) -> bool:
        """Take the lock if it is free (then nobody waits for it either); never waits."""
        with self._state:
            if self._held:
                return False
            self._held = True
            return True

    def acquire(self, timeout: float | None = None) -> bool:
        """Block until held (True), or for *timeout* seconds at most (then False, and out of the
        queue). Worker threads only: on the event loop it would stall everything."""
        waiter = self._take_or_queue(_ThreadWaiter)
        if waiter is None or waiter.wait(None if timeout is None else max(timeout, 0.0)):
            return True
        with self._state:
            queued = waiter in self._waiters
            if queued:
                self._waiters.remove(waiter)
        return not queued  # (handed over just as the wait ended: then it is ours)

    async def acquire_async(self) -> None:
        """Wait on the event loop until held; a cancelled wait leaves the lock as it was."""
        waiter = self._take_or_queue(_LoopWaiter)
        if waiter is None:
            return
        try:
            await waiter.future
        except BaseException:
            _withdraw(self._state, self._waiters, waiter, give_back=self.release)
            raise

    def release(self) -> None:
        with self._state:
            self.owner = None
            if not self._held:
                raise RuntimeError("release of an unheld ProcessLock")
            if self._waiters:
                self._waiters.popleft().wake()  # ownership passes on; _held stays True
            else:
                self._held = False

    def __enter__(self) -> ProcessLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


PROCESS_LOCK = ProcessLock()

# The fleet-wide lock every holder of PROCESS_LOCK also takes (``lock:`` in the launcher's
# config, :mod:`.fleet_lock`); None: the process lock (and flock) alone, as without it.
_FLEET: Any = None


def use_fleet_lock(fleet: Any) -> None:
    """Make every holder of :data:`PROCESS_LOCK` take *fleet* too (a
    :class:`~.fleet_lock.FleetLock`), after it; None goes back to the process lock alone."""
    global _FLEET
    _FLEET = fleet


def fleet_lock() -> Any:
    """The fleet lock in use, or None. (A call that must not wait, the relay's inline path,
    leaves a locked call to the path that can.)"""
    return _FLEET


class CallGate:
    """Lets at most ``capacity()`` calls in at once; the others wait on their event loop, in turn.

    Calls of a server that takes :data:`PROCESS_LOCK` itself (``ServerSpec.locks_itself``)
    wait for it in their worker thread. Under the launcher this gate bounds how many such
    calls run at once, so waiting threads can never take the whole pool: the tool holding the
    lock (a launcher-held call of another server) always finds a thread to finish in.
    """

    def __init__(self, capacity: Callable[[], int]) -> None:
        self._capacity = capacity
        self._state = threading.Lock()  # guards the two fields below, held for microseconds
        self._inside = 0
        self._waiters: deque[_LoopWaiter] = deque()

    async def enter(self) -> None:
        """Wait on the event loop until let in; a cancelled wait leaves the gate as it was."""
        with self._state:
            if not self._waiters and self._inside < self._capacity():
                self._inside += 1
                return
            waiter = _LoopWaiter()
            self._waiters.append(waiter)
        try:
            await waiter.future
        except BaseException:
            _withdraw(self._state, self._waiters, waiter, give_back=self.leave)
            raise

    def leave(self) -> None:
        with self._state:
            if self._waiters:
                self._waiters.popleft().wake()  # the place passes on; _inside stays
            else:
                self._inside -= 1


def _half_the_worker_threads() -> int:
    import anyio.to_thread

    return max(1, int(anyio.to_thread.current_default_thread_limiter().total_tokens) // 2)


SELF_LOCKING_CALLS = CallGate(_half_the_worker_threads)

# The hold of the async caller whose work this is; worker threads inherit it (AnyIO copies
# context variables into them), so a tool's own ``exclusive()`` knows its caller holds the lock.
_HOLD: contextvars.ContextVar[object | None] = contextvars.ContextVar("dpt_hold", default=None)


# When the call on whose behalf this code runs must give up waiting for the lock (a
# ``time.monotonic()`` value): set by the launcher's guard around a server that locks itself,
# so the wait in a worker thread is bounded by the call's timeout, counted from its arrival.
CALL_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "dpt_call_deadline", default=None
)

# When the call arrived (a ``time.monotonic()`` value), set when something made it wait before
# the launcher's guard (a server still starting): its timeout counts from then, not from the guard.
CALL_ARRIVAL: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "dpt_call_arrival", default=None
)


class LockWaitTimeout(Exception):
    """The call's deadline (:data:`CALL_DEADLINE`) passed while it waited for the process lock;
    nothing was done. (Not an ``OSError``: stores report those as their own failures.)"""


def _acquire_for_call() -> None:
    """Take :data:`PROCESS_LOCK` in a worker thread, within the caller's deadline if it has one,
    then the fleet lock if one is in use (given back with :func:`_release_for_call`)."""
    deadline = CALL_DEADLINE.get()
    started = time.perf_counter()
    if deadline is None:
        PROCESS_LOCK.acquire()
    elif not PROCESS_LOCK.acquire(timeout=deadline - time.monotonic()):
        lock_waited(time.perf_counter() - started)
        raise LockWaitTimeout("the process lock stayed taken until the call's timeout")
    fleet = _FLEET
    if fleet is not None:
        try:
            fleet.acquire(deadline)
        except BaseException:
            PROCESS_LOCK.release()
            lock_waited(time.perf_counter() - started)
            raise
        PROCESS_LOCK.fleet = fleet
    lock_waited(time.perf_counter() - started)


def _release_for_call() -> None:
    fleet, PROCESS_LOCK.fleet = PROCESS_LOCK.fleet, None
    if fleet is not None:
        fleet.release_now()
    PROCESS_LOCK.release()


def _held_by_caller() -> bool:
    hold = _HOLD.get()
    return hold is not None and hold is PROCESS_LOCK.owner


LOCK_FILE_NAME = ".dpt.lock"

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def file_lock(lock_path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on *lock_path* (created if missing). Blocking: worker threads only."""
    # O_NOFOLLOW: a symlink planted at the lock path must not lock (or create) a file elsewhere.
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


@contextmanager
def folder_lock(folder: str | os.PathLike[str], *, marked: bool = False) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the folder itself (its descriptor).

    Locking the folder, not a file in it, means nothing done to ``.dpt.lock`` (moved
    away, replaced by a folder) can break or split the lock. With *marked*, the marker
    in the folder is (re)made so that writers of other servers find the folder (see
    :func:`locked_folders`): memory-tools' own folder; never a filesystem root.
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if marked:
            mark(fd)
        yield
    finally:
        os.close(fd)


def mark(folder: int | str | os.PathLike[str]) -> None:
    """Create the ``.dpt.lock`` marker in a folder (a path or a descriptor) if it is missing."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        if isinstance(folder, int):
            os.close(os.open(LOCK_FILE_NAME, flags, 0o600, dir_fd=folder))
        else:
            os.close(os.open(os.path.join(folder, LOCK_FILE_NAME), flags, 0o600))
    except OSError:
        pass  # something else sits there; the lock is on the folder, so it still works


def registry() -> Path:
    """The per-user folder of markers kept outside the folders they mark.

    ``$XDG_RUNTIME_DIR``, else ``/run/user/<uid>`` (what the former is on systemd
    machines, for processes started without it), else the per-user cache folder: each is
    used only when it is a folder of this user's, so every launcher of one user on one
    machine finds the same one.
    """
    uid = os.getuid()
    for base in (os.environ.get("XDG_RUNTIME_DIR"), f"/run/user/{uid}"):
        if not base:
            continue
        try:
            info = os.stat(base)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == uid:
            return Path(base) / APP_NAME / "locked-folders"
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME)) / "locked-folders"


def _identity(info: os.stat_result) -> str:
    return f"{info.st_dev:x}-{info.st_ino:x}"


def register(folder: str | os.PathLike[str]) -> None:
    """Mark *folder* as locked by its writers, in :func:`registry` rather than in the folder
    (a filesystem root is the user's project); in the folder only when that cannot be done."""
    try:
        where = registry()
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = where / _identity(os.stat(folder))
        os.close(os.open(name, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except OSError:
        mark(folder)


def locked_folders(path: str | os.PathLike[str]) -> list[Path]:
    """The folders above *path*, outermost first, that are marked: a ``.dpt.lock`` in the
    folder, or the folder's identity in :func:`registry`.

    Every writer of a file takes the flock of each of them (memory-tools: its memory
    folder; filesystem: all of them), so two writers of one file always share one.
    """
    try:
        registered = set(os.listdir(registry()))
    except OSError:
        registered = set()
    found = []
    for folder in reversed(Path(os.path.normpath(path)).parents):
        if os.path.lexists(os.path.join(folder, LOCK_FILE_NAME)):
            found.append(folder)
        elif registered:
            try:
                info = os.stat(folder)
            except OSError:
                continue
            if _identity(info) in registered:
                found.append(folder)
    return found


@contextmanager
def exclusive(
    lock_path: str | os.PathLike[str] | None = None,
    *,
    folders: Iterable[str | os.PathLike[str]] = (),
    marked: bool = False,
) -> Iterator[None]:
    """Hold the process lock, then the file lock on *lock_path* and the folder locks of *folders*
    (with *marked*, each keeps a ``.dpt.lock`` marker: see :func:`folder_lock`).

    The order is always process lock first, then the folders outermost first (by
    depth, then name), so two processes can never deadlock on each other. When the
    async caller already holds the process lock for this very call (:func:`hold_async`,
    e.g. the launcher), it is not taken again; otherwise not re-entrant.
    """
    ordered = sorted({Path(os.path.normpath(f)) for f in folders}, key=_lock_order)
    with ExitStack() as stack:
        if not _held_by_caller():
            _acquire_for_call()
            stack.callback(_release_for_call)
        if lock_path is not None:
            stack.enter_context(file_lock(lock_path))
        held: set[tuple[int, int]] = set()
        for folder in ordered:
            try:
                info = os.stat(folder)
            except OSError:
                continue  # gone: nobody can write below it through this path
            if (info.st_dev, info.st_ino) not in held:  # one folder, two spellings: lock once
                held.add((info.st_dev, info.st_ino))
                stack.enter_context(folder_lock(folder, marked=marked))
        yield


def _lock_order(folder: Path) -> tuple[int, str]:
    return len(folder.parts), str(folder)


def run_exclusive(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Call *fn* while holding the process lock (sync; for worker threads)."""
    with exclusive():
        return fn(*args, **kwargs)


@asynccontextmanager
async def admit_self_locking() -> AsyncIterator[None]:
    """Run a call that takes the process lock itself, only around its disk work.

    The launcher does not hold the lock for it (its reading and computing then block no
    other writer); it only waits its turn at :data:`SELF_LOCKING_CALLS`.
    """
    await SELF_LOCKING_CALLS.enter()
    try:
        yield
    finally:
        SELF_LOCKING_CALLS.leave()


@asynccontextmanager
async def hold_async() -> AsyncIterator[None]:
    """Hold the process lock from async code; the wait takes no worker thread.

    Sync work this call hands to worker threads sees the hold, so a tool that takes
    :func:`exclusive` itself does not wait for the lock its own caller holds.
    """
    started = time.perf_counter()
    fleet = _FLEET
    try:
        await PROCESS_LOCK.acquire_async()
        if fleet is not None:
            try:
                await fleet.acquire_async(CALL_DEADLINE.get())
            except BaseException:
                PROCESS_LOCK.release()
                raise
    finally:  # (a wait cut short by the call's timeout is a wait too)
        lock_waited(time.perf_counter() - started)
    hold = object()
    PROCESS_LOCK.owner = hold
    token = _HOLD.set(hold)
    try:
        yield
    finally:
        _HOLD.reset(token)
        if fleet is not None:
            fleet.release()
        PROCESS_LOCK.release()


@asynccontextmanager
async def hold_async_unless_held() -> AsyncIterator[None]:
    """:func:`hold_async`, unless the caller already holds the lock for this very call
    (the launcher, around a tool that also locks itself): the lock is not re-entrant."""
    if _held_by_caller():
        yield
        return
    async with hold_async():
        yield
