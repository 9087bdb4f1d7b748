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

from .folder_locks import (
    LOCK_FILE_NAME,
    exclusive,
    file_lock,
    folder_lock,
    locked_folders,
    mark,
    register,
    registry,
    run_exclusive,
)
from .process_lock import (
    CALL_ARRIVAL,
    CALL_DEADLINE,
    CURRENT_FENCE,
    PROCESS_LOCK,
    SELF_LOCKING_CALLS,
    CallGate,
    LockWaitTimeout,
    ProcessLock,
    admit_self_locking,
    fleet_lock_in_use,
    hold_async,
    hold_async_unless_held,
    use_fleet_lock,
)

__all__ = [
    "CALL_ARRIVAL",
    "CALL_DEADLINE",
    "CURRENT_FENCE",
    "LOCK_FILE_NAME",
    "PROCESS_LOCK",
    "SELF_LOCKING_CALLS",
    "CallGate",
    "LockWaitTimeout",
    "ProcessLock",
    "admit_self_locking",
    "exclusive",
    "file_lock",
    "fleet_lock_in_use",
    "folder_lock",
    "hold_async",
    "hold_async_unless_held",
    "locked_folders",
    "mark",
    "register",
    "registry",
    "run_exclusive",
    "use_fleet_lock",
]
