"""The one process-wide write lock, plus an OS file lock for stores shared between processes.

Guarantee (documented in docs/guarantees.md):

* In one process, every tool that changes state, in every mounted server, runs
  while holding :data:`PROCESS_LOCK`, from its checks to the end of its change.
  Overlapping calls therefore behave as if they ran one after the other.
* A store on disk (the memory directory) is also guarded by ``flock`` on a lock
  file inside it, taken after the process lock, so two *processes* on the same
  directory serialize their changes too. ``flock`` is advisory: it protects
  against other users of this module, not against an unrelated program writing
  into the folder.

The lock is a :class:`threading.Lock` and must only be taken in worker threads
(fastmcp runs sync tools in AnyIO worker threads). Async code uses
:func:`hold_async`, which waits in a worker thread and never blocks the event loop.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
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
def exclusive(lock_path: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Hold the process lock and, when *lock_path* is given, the file lock on it.

    The order is always process lock first, then file lock, so two processes can
    never deadlock on each other. Not re-entrant.
    """
    with PROCESS_LOCK:
        if lock_path is None:
            yield
        else:
            with file_lock(lock_path):
                yield


def store_lock_path(store_dir: str | os.PathLike[str]) -> Path:
    """Where the cross-process lock file of a store lives (hidden, so never listed)."""
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
