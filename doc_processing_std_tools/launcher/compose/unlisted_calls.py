"""A ``tools/call`` of a name no server lists, under one external server's namespace: asked of
that server, as a direct connection would (issue #34).

A server may list to a client fewer tools than it has (server-everything shows
``get-roots-list`` only to a client with roots) and answer a call of a hidden one itself, with
its own JSON-RPC error. fastmcp knows only what a server listed and answers anything else with
its own "Unknown tool". :class:`UnlistedCalls` sends such a call to the server whose namespace
the name carries, under that mount's rules (its ``tools:`` filter, lock, timeout, audit, rate
limits, access: :meth:`~..calls.policed_tools.PolicedListing.unlisted`), when that server is
the only one that could have meant it (:func:`unlisted_owner`); otherwise the "Unknown tool"
stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import mcp_types

from ...seams.fastmcp_server import add_server_middleware, own_name
from ..external.relay_targets import RelayTarget
from .mount import Mount

if TYPE_CHECKING:
    from ..external.relay import ToolRelay


class UnlistedCalls:
    """An SDK server middleware after the relay: a call fastmcp answers "Unknown tool" goes to
    the one external server whose namespace it carries."""

    def __init__(self, composition: Any, relay: ToolRelay) -> None:
        self.composition = composition
        self.relay = relay

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        result = await call_next(ctx)
        if ctx.method != "tools/call" or not isinstance(ctx.params, dict):
            return result
        name = ctx.params.get("name")
        if not isinstance(name, str) or not unknown_tool(result, name):
            return result
        exposure = self.composition.exposure
        if exposure is not None and ("tool", name) in exposure.owners:
            return result  # (a name the composition gave to a server: that one's answer)
        owner = unlisted_owner(self.composition.mounts, name)
        if owner is None:
            return result
        mount, own = owner
        tool = mount.policing.unlisted(own) if mount.policing is not None else None
        if tool is None:
            return result
        relayed = await self.relay.relay_unlisted(
            ctx, RelayTarget.of(tool, supervisor=mount.supervisor)
        )
        return result if relayed is None else relayed


def unknown_tool(result: Any, name: str) -> bool:
    """Whether *result* (a model, or already its JSON) is fastmcp's answer to a call of a tool
    it cannot find."""
    if isinstance(result, mcp_types.CallToolResult):
        if result.is_error is not True:  # (every successful call: no dump)
            return False
        result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    if not isinstance(result, dict) or result.get("isError") is not True:
        return False
    return result.get("content") == [{"type": "text", "text": f"Unknown tool: {name!r}"}]


def unlisted_owner(mounts: Sequence[Mount], name: str) -> tuple[Mount, str] | None:
    """The external mount a call of *name*, which no server lists, is asked of, and the name as
    that server has it; None unless exactly one server could have meant it.

    That is: exactly one mount's ``namespace_`` begins *name*, and it is an external server
    that is up; no mount had *name* at its first listing (an in-process tool, one its rules
    leave out); and no external server is mounted without a namespace (it may answer any name,
    so it could have meant this one too). Whether its ``tools:`` rules admit the rest is its
    listing's to say (:meth:`PolicedListing.unlisted`).
    """
    owner: Mount | None = None
    own = name
    for mount in mounts:
        if name in mount.every_tool:
            return None
        namespace = mount.entry.namespace
        if not namespace:
            if mount.supervisor is not None:
                return None
            continue
        if (unprefixed := own_name(namespace, name)) != name:
            if owner is not None or mount.supervisor is None:
                return None
            owner, own = mount, unprefixed
    if owner is None or owner.state != "up":
        return None
    return owner, own


def install_unlisted_calls(composition: Any, relay: ToolRelay) -> UnlistedCalls:
    """Installed before the relay (so after it in the chain: it sees what fastmcp answers)."""
    calls = UnlistedCalls(composition, relay)
    add_server_middleware(composition.root, calls)
    return calls
