"""The middleware that keeps the cache of the client's MCP roots true (:class:`RootsWatch`), and
its place on a server served alone (:func:`watch_client_roots`); the roots themselves:
:mod:`.workspace`. Imported when a server is served: importing a server package must not load
fastmcp."""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP
from fastmcp.server.middleware import Middleware

from .workspace import _CACHE, _GENERATION, _LIST_CHANGED, _WATCHED, _connection_state


class RootsWatch(Middleware):
    """Marks sessions whose notifications this server sees, and forgets their
    cached roots on ``notifications/roots/list_changed``.

    Only the server that is actually being served receives notifications, so a
    copy on a mounted server never marks anything (and changes nothing).
    """

    async def on_notification(self, context: Any, call_next: Any) -> Any:
        method = getattr(context, "method", None)
        fastmcp_context = getattr(context, "fastmcp_context", None)
        try:
            session = fastmcp_context.session if fastmcp_context else None
        except RuntimeError:
            session = None
        state = _connection_state(session)
        if state is not None:
            if method == "notifications/initialized":
                state[_WATCHED] = True
            elif method == _LIST_CHANGED:
                state.pop(_CACHE, None)
                state[_GENERATION] = state.get(_GENERATION, 0) + 1
        return await call_next(context)


def watch_client_roots(server: FastMCP) -> FastMCP:
    """Add a :class:`RootsWatch` to the server that will be served (once); returns it."""
    if not any(isinstance(m, RootsWatch) for m in server.middleware):
        server.add_middleware(RootsWatch())
    return server
