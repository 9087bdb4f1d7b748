"""Who takes the process lock for a mounted tool's call, and the fleet lock (``lock:``) too."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

from ... import locking
from ...locking.fleet_lock import FleetLock
from ..calls.policy import LockMode
from ..config.schema import LockConfig, ServerEntry
from .mount import Mount

if TYPE_CHECKING:
    from fastmcp.tools import Tool


def needs_lock(policy: str, tool: Tool) -> bool:
    """``lock: auto``: every tool that may change state runs under the process lock.

    ``always`` and ``never`` override the annotation. See :func:`locks_itself` for who
    takes it: the launcher, or the server around its own disk work.
    """
    if policy != "auto":
        return policy == "always"
    return not (tool.annotations and tool.annotations.read_only_hint)


def lock_mode(policy: str, self_locking: bool, tool: Tool) -> LockMode:
    """Who takes the process lock for a call of *tool*: nobody, the launcher, or (a server that
    :func:`locks_itself`) the tool around its disk work."""
    if not needs_lock(policy, tool):
        return LockMode.NONE
    return LockMode.ADMITTED if self_locking else LockMode.HELD


def locks_itself(mount: Mount) -> bool:
    """Whether *mount*'s state-changing tools take the process lock themselves (``lock: auto``
    on a ``ServerSpec.locks_itself`` server), around their disk work only.

    The launcher then does not hold the lock for the whole call, which would also cover the
    tool's reading and computing (a slow ``memory_str_replace`` search would block every
    writer of every server); it only bounds how many such calls run at once
    (:func:`locking.admit_self_locking`), so their thread-side waits never take the whole
    worker pool. ``lock: always`` keeps the launcher's hold (the tool's own take then skips).
    """
    return mount.spec is not None and mount.spec.locks_itself and mount.entry.lock == "auto"


def locked_names(entry: ServerEntry, tools: tuple[Tool, ...]) -> frozenset[str]:
    """The exposed names among *tools* that run under the process lock."""
    return frozenset(t.name for t in tools if needs_lock(entry.lock, t))


def use_fleet_lock(sessions: AsyncExitStack, config: LockConfig) -> None:
    """Make every locked call take the fleet lock of *config* too, until *sessions* close."""
    fleet = FleetLock(config.url, config.name, config.lease)
    locking.use_fleet_lock(fleet)

    def stop() -> None:
        if locking.fleet_lock_in_use() is fleet:
            locking.use_fleet_lock(None)
        fleet.close()

    sessions.callback(stop)
