"""The one process-wide write lock: :data:`PROCESS_LOCK`, how a call holds it from async code
(:func:`hold_async`) or is admitted to take it itself (:func:`admit_self_locking`), and the
call's deadline for waiting on it (:data:`CALL_DEADLINE`). See the package docstring."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from ..exceptions import DptError
from ..telemetry import lock_waited


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
        self.fence_token: contextvars.Token[int | None] | None = None  # and its CURRENT_FENCE

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


def fleet_lock_in_use() -> Any:
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
    # (here, not at the top: 8 ms, on the path of importing a server package)
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


# The fencing number of the fleet lock's grant this call holds (:mod:`.fleet_lock`), or None:
# relayed calls carry it in ``_meta``, memory-tools' Redis store checks it as it writes.
CURRENT_FENCE: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "dpt_current_fence", default=None
)


class LockWaitTimeout(DptError):
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
            fence = fleet.acquire(deadline)
        except BaseException:
            PROCESS_LOCK.release()
            lock_waited(time.perf_counter() - started)
            raise
        PROCESS_LOCK.fleet = fleet
        PROCESS_LOCK.fence_token = CURRENT_FENCE.set(fence)
    lock_waited(time.perf_counter() - started)


def _release_for_call() -> None:
    """Give back what :func:`_acquire_for_call` took; ``FleetLockLost`` when the fleet lock's
    grant ran out during the call."""
    fleet, PROCESS_LOCK.fleet = PROCESS_LOCK.fleet, None
    try:
        if fleet is not None:
            if PROCESS_LOCK.fence_token is not None:
                CURRENT_FENCE.reset(PROCESS_LOCK.fence_token)
                PROCESS_LOCK.fence_token = None
            fleet.release_checked()
    finally:
        PROCESS_LOCK.release()


def _held_by_caller() -> bool:
    hold = _HOLD.get()
    return hold is not None and hold is PROCESS_LOCK.owner


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
    fence = None
    try:
        await PROCESS_LOCK.acquire_async()
        if fleet is not None:
            try:
                fence = await fleet.acquire_async(CALL_DEADLINE.get())
            except BaseException:
                PROCESS_LOCK.release()
                raise
    finally:  # (a wait cut short by the call's timeout is a wait too)
        lock_waited(time.perf_counter() - started)
    hold = object()
    PROCESS_LOCK.owner = hold
    token = _HOLD.set(hold)
    fenced = CURRENT_FENCE.set(fence)
    done = False
    try:
        yield
        done = True
    finally:
        CURRENT_FENCE.reset(fenced)
        _HOLD.reset(token)
        try:
            if fleet is not None and done:
                await fleet.release_async()  # (FleetLockLost: the call answers so)
            elif fleet is not None:
                fleet.release()  # a call cut short does not wait for Redis
        finally:
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
