"""Per-user listings (``access:``): :class:`AccessGate` leaves out of each ``tools/list`` the
tools its caller may not use.

Installed in the SDK server's chain after :class:`~.profile_gate.ProfileGate` (which lists
through it: a profile's list and its ``search_tools`` catalog are cut too) and before the
relay. The calls themselves are refused once, by the call policy's guards, on every path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...seams.fastmcp_server import add_server_middleware
from ..calls.access import Access
from ..calls.guards import CallGuards


class AccessGate:
    """An SDK server middleware: each ``tools/list`` answer cut to what its caller may use."""

    def __init__(self, composition: Any, guards: CallGuards, access: Access) -> None:
        self.composition, self.guards, self.access = composition, guards, access
        self._owners: tuple[Any, dict[str, str]] = (None, {})

    def owners(self) -> dict[str, str]:
        """Exposed tool name -> its mount's name (rebuilt when the mounts change)."""
        mounts = self.composition.mounts
        if self._owners[0] is not mounts:
            self._owners = (mounts, {t.name: m.name for m in mounts for t in m.tools})
        return self._owners[1]

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method != "tools/list":
            return await call_next(ctx)
        listing = await call_next(ctx)
        if not isinstance(listing, Mapping):
            return listing
        caller = self.guards.caller(ctx.session, getattr(ctx.request, "headers", None))
        owners, allows = self.owners(), self.access.allows_tool
        tools = [
            t
            for t in listing.get("tools", [])
            if isinstance(t, Mapping) and allows(caller, owners.get(t["name"], ""), t["name"])
        ]
        return {**listing, "tools": tools}


def install_access(composition: Any) -> AccessGate | None:
    """Cut every listing per caller when the config has ``access:`` (else nothing, no cost)."""
    guards = composition.guards
    if guards is None or guards.access is None:
        return None
    gate = AccessGate(composition, guards, guards.access)
    add_server_middleware(composition.root, gate)
    return gate
