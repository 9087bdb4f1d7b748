"""``resources/subscribe`` and ``resources/unsubscribe``: forwarded to the external server that
owns the resource, whose ``notifications/resources/updated`` then reach the subscribed client.

fastmcp serves no subscriptions; the composed server answers these two methods itself
(so it declares ``resources.subscribe``). The URI a client names is the one the launcher
exposes (namespaced); the server is asked under its own URI
(:meth:`.external.client_requests.FrontLink.subscribe`). A resource of an in-process server, or an
unknown URI, is refused with -32602 naming why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import mcp_types
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from ...seams.fastmcp_server import low_level_server, own_uri


class HasMounts(Protocol):
    """What is read of the composition (``composition.Composition``): its served root and its
    current mounts (a reload swaps them)."""

    @property
    def root(self) -> Any: ...
    @property
    def mounts(self) -> Sequence[Any]: ...


class Subscriptions:
    """The two request handlers, bound to a composition (its current mounts)."""

    def __init__(self, composition: HasMounts) -> None:
        self.composition = composition

    def install(self) -> None:
        server = low_level_server(self.composition.root)
        server.add_request_handler(
            "resources/subscribe", mcp_types.SubscribeRequestParams, self.subscribe
        )
        server.add_request_handler(
            "resources/unsubscribe", mcp_types.UnsubscribeRequestParams, self.unsubscribe
        )

    async def subscribe(self, ctx: Any, params: Any) -> dict[str, Any]:
        mount, own = await self._owner(str(params.uri))
        assert mount.supervisor is not None
        front = await mount.supervisor.front_of(ctx.session)  # (a client's own session's)
        await front.subscribe(ctx.session, str(params.uri), own)
        return {}

    async def unsubscribe(self, ctx: Any, params: Any) -> dict[str, Any]:
        mount, own = await self._owner(str(params.uri))
        assert mount.supervisor is not None
        front = await mount.supervisor.front_of(ctx.session)
        await front.unsubscribe(ctx.session, own)
        return {}

    async def _owner(self, uri: str) -> tuple[Any, str]:
        """The external mount that exposes *uri*, and the URI as that server names it."""
        mounts = self.composition.mounts
        listed = [m for m in mounts if uri in m.resources]
        for mount in listed or [m for m in mounts if m.supervisor is not None]:
            if mount.supervisor is None:
                raise MCPError(
                    INVALID_PARAMS,
                    f"resource {uri[:200]!r} of server {mount.name!r} offers no subscription "
                    "(only external servers' resources do, when the server does)",
                )
            if mount.listing is None:
                continue
            try:
                found = await mount.listing.get_resource(uri)
            except Exception:  # (a server that is down, or has no such resource)
                found = None
            if found is not None:
                return mount, own_uri(mount.entry.namespace, uri)
        raise unknown_resource(uri)


def unknown_resource(uri: str) -> MCPError:
    """What a subscription to a URI no server exposes answers."""
    return MCPError(INVALID_PARAMS, f"unknown resource {uri[:200]!r}")
