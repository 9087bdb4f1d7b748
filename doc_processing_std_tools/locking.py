"""The one process-wide write lock, plus an OS file lock for stores shared between processes.

Guarantee (documented in docs/guarantees.md):

* In one process, every tool that changes state, in every mounted server, runs
  while holding :data:`PROCESS_LOCK`, from its checks to the end of its change.
  Overlapping calls therefore behave as if they ran one after the other.
* A store on disk (the memory directory, each writable filesystem root) is also
  guarded by ``flock`` on the folder itself, taken after the process lock, so two
  *processes* on the same folder serialize their changes too. A ``.dpt.lock``
  marker in the folder tells writers of other servers to take that lock as well
  (:func:`locked_folders`). ``flock`` is advisory: it protects against other users
  of this module, not against an unrelated program writing into the folder.

The lock is a :class:`threading.Lock` and must only be taken in worker threads
(fastmcp runs sync tools in AnyIO worker threads). Async code uses
:func:`hold_async`, which waits in a worker thread and never blocks the event loop.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import ParamSpec, TypeVar

PROCESS_LOCK = threading.Lock()

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
def folder_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the folder itself (its descriptor), marking it as locked.

    Locking the folder, not a file in it, means nothing done to ``.dpt.lock`` (moved
    away, replaced by a folder) can break or split the lock. The marker is (re)made
    so that writers of other servers find the folder (see :func:`locked_folders`).
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
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


def locked_folders(path: str | os.PathLike[str]) -> list[Path]:
    """The folders above *path*, outermost first, that hold a ``.dpt.lock`` marker.

    Every writer of a file takes the flock of each of them (memory-tools: its memory
    folder; filesystem: all of them), so two writers of one file always share one.
    """
    return [
        folder
        for folder in reversed(Path(os.path.normpath(path)).parents)
        if os.path.lexists(os.path.join(folder, LOCK_FILE_NAME))
    ]


@contextmanager
def exclusive(
    lock_path: str | os.PathLike[str] | None = None,
    *,
    folders: Iterable[str | os.PathLike[str]] = (),
) -> Iterator[None]:
    """Hold the process lock, then the file lock on *lock_path* and the folder locks of *folders*.

    The order is always process lock first, then the folders outermost first (by
    depth, then name), so two processes can never deadlock on each other. Not re-entrant.
    """
    ordered = sorted({Path(os.path.normpath(f)) for f in folders}, key=_lock_order)
    with PROCESS_LOCK, ExitStack() as stack:
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
                stack.enter_context(folder_lock(folder))
        yield


def _lock_order(folder: Path) -> tuple[int, str]:
    return len(folder.parts), str(folder)


def store_lock_path(store_dir: str | os.PathLike[str]) -> Path:
    """Where the cross-process lock marker of a store lives (hidden, so never listed)."""
    return Path(store_dir) / LOCK_FILE_NAME


def run_exclusive(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Call *fn* while holding the process lock (sync; for worker threads)."""
    with exclusive():
        return fn(*args, **kwargs)


@asynccontextmanager
async def hold_async() -> AsyncIterator[None]:
    """Hold the process lock from async code without blocking the event loop.

    The wait happens in a worker thread and is shielded from cancellation, so a
    cancelled caller can never leave the lock acquired and unreleased.
    """
    import anyio

    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(PROCESS_LOCK.acquire)
    try:
        yield
    finally:
        PROCESS_LOCK.release()
