"""Per-user listings and items (``access:``): :class:`AccessGate` leaves out of each list what
its caller may not use, and answers a denied server's prompt, read, subscription or
completion as an unknown one's.

A tool is judged by :meth:`Access.allows_tool` (its server and its name); a prompt, resource or
resource template by :meth:`Access.allows_server` (its server alone). Installed in the SDK
server's chain outside every middleware that serves prompts and resources itself (completions,
unlisted reads, subscriptions) and inside :class:`~.profile_gate.ProfileGate` (which lists
through it: a profile's list and its ``search_tools`` catalog are cut too). Tool calls
themselves are refused once, by the call policy's guards, on every path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from ...seams.fastmcp_server import add_server_middleware
from ..calls.access import Access, CallerAccess
from ..calls.audit import Caller
from ..calls.guards import CallGuards
from .completions import COMPLETE, EMPTY
from .own_lists import LISTS
from .owners import Owners
from .subscriptions import unknown_resource
from .unlisted_reads import resource_not_found

READS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})
GATED = frozenset({*LISTS, *READS, "prompts/get", COMPLETE})


class AccessGate:
    """An SDK server middleware: each list cut to what its caller may use; a prompt, read,
    subscription or completion of a server the caller may not use answered as an unknown
    item's (no oracle for what a denied server holds)."""

    def __init__(self, composition: Any, guards: CallGuards, access: Access) -> None:
        self.composition, self.guards, self.access = composition, guards, access

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        method = ctx.method
        if method not in GATED:
            return await call_next(ctx)
        caller = self.guards.caller(ctx.session, getattr(ctx.request, "headers", None))
        if method in LISTS:
            return self._cut(method, await call_next(ctx), caller)
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        if method == "prompts/get":
            name = params.get("name")
            if isinstance(name, str) and not self._allows(caller, self._prompt_owners(name)):
                raise MCPError(INVALID_PARAMS, f"Unknown prompt: {name!r}")  # (fastmcp's)
        elif method in READS:
            uri = params.get("uri")
            if isinstance(uri, str) and not self._allows(caller, self._owners().of_uri(uri)):
                raise (
                    resource_not_found(uri) if method == "resources/read" else unknown_resource(uri)
                )
        else:
            ref = params.get("ref")
            if isinstance(ref, Mapping) and not self._allows(caller, self._ref_owners(ref)):
                return EMPTY  # (what a reference no server exposes gets)
        return await call_next(ctx)

    def _cut(self, method: str, listing: Any, caller: Caller) -> Any:
        kind, key = LISTS[method]
        if not isinstance(listing, Mapping):
            return listing
        owners, allowed = self._owners(), self.access.of(caller)
        kept = [
            item
            for item in listing.get(kind, [])
            if isinstance(item, Mapping) and _shown(method, owners, item.get(key), allowed)
        ]
        return {**listing, kind: kept}

    def _owners(self) -> Owners:
        owners: Owners = self.composition.owners()  # (cached per mounts list)
        return owners

    def _prompt_owners(self, name: str) -> tuple[str, ...]:
        owner = self._owners().prompts.get(name)
        return () if owner is None else (owner,)

    def _ref_owners(self, ref: Mapping[str, Any]) -> tuple[str, ...]:
        if isinstance(name := ref.get("name"), str):
            return self._prompt_owners(name)
        if isinstance(uri := ref.get("uri"), str):
            return self._owners().of_uri(uri)
        return ()

    def _allows(self, caller: Caller, servers: Sequence[str]) -> bool:
        """Whether *caller* may use every one of *servers* (none: an item no server serves)."""
        allowed = self.access.of(caller)
        return all(allowed.allows_server(server) for server in servers)


def _shown(method: str, owners: Owners, name: Any, allowed: CallerAccess) -> bool:
    """Whether an item named *name* of *method*'s list is shown to a caller: a tool its rules
    allow; a prompt, resource or template of a server they may use, or of none."""
    if not isinstance(name, str):
        return False
    owner = owners.key_owner(method, name)
    if method == "tools/list":
        return allowed.allows_tool(owner or "", name)
    return owner is None or allowed.allows_server(owner)


def install_access(composition: Any) -> AccessGate | None:
    """Cut every listing per caller when the config has ``access:`` (else nothing, no cost)."""
    guards = composition.guards
    if guards is None or guards.access is None:
        return None
    gate = AccessGate(composition, guards, guards.access)
    add_server_middleware(composition.root, gate)
    return gate
