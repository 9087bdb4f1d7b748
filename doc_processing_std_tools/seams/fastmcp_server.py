"""fastmcp's server internals the launcher uses: its lifespan, its SDK server, its providers,
the request being served, its session-state store, and when a mounted server may be grafted onto
the root.

Pinned by ``tests/seams/``: a fastmcp upgrade that changes one of these fails there first.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any

from fastmcp import FastMCP
from fastmcp.resources.template import match_uri_template
from fastmcp.server.context import _get_client_log_level
from fastmcp.server.dependencies import fastmcp_request_ctx
from fastmcp.server.middleware.dereference import DereferenceRefsMiddleware
from fastmcp.server.providers import Provider
from fastmcp.server.server import default_lifespan
from fastmcp.server.transforms import Namespace
from mcp.server.lowlevel import Server


def lifespan_manager(server: FastMCP) -> AbstractAsyncContextManager[Any]:
    """Runs the server's lifespan and every mounted provider's (``FastMCP._lifespan_manager``)."""
    return server._lifespan_manager()


def low_level_server(server: FastMCP) -> Server[Any]:
    """The mcp SDK server that speaks the protocol for *server* (``FastMCP._mcp_server``)."""
    return server._mcp_server


def additional_http_routes(server: FastMCP) -> list[Any]:
    """Routes the server's own components add to its HTTP app (``_get_additional_http_routes``)."""
    return list(server._get_additional_http_routes())


def behaves_as_default(server: FastMCP) -> bool:
    """True when nothing about *server* differs from a fresh ``FastMCP()`` but its components.

    Then serving its providers from the root is indistinguishable from serving the
    server itself: no lifespan, transforms, middleware (beyond fastmcp's default),
    auth, error masking or any other setting of its own.
    """
    if (
        getattr(server, "_lifespan", None) is not default_lifespan
        or server.transforms
        or server.auth is not None
        or not all(type(m) is DereferenceRefsMiddleware for m in server.middleware)
        or type(server) is not FastMCP
    ):
        return False
    probe = vars(FastMCP("probe"))
    scalar = (bool, int, float, str, type(None))
    return all(
        value == probe.get(key)
        for key, value in vars(server).items()
        if isinstance(value, scalar) and key in probe
    )


class StateStoreOnFirstWrite:
    """fastmcp's session-state store (``FastMCP._state_store``), built when first written.

    fastmcp reads it on every list (a session's visibility rules), and building it imports
    py-key-value-aio: 0.14-0.4 s here (``python -X importtime``; its modules are re-typed by
    beartype's import hook), paid by the first ``tools/list``. An in-memory store nothing has
    written to holds nothing, so until something does, a read answers None without it.
    """

    def __init__(self, server: FastMCP) -> None:
        self._server = server
        self._store: Any = None

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        if self._store is None:
            return None
        return await self._store.get(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if self._store is None:
            self._server._FastMCP__state_store = None  # type: ignore[attr-defined]
            self._store = FastMCP._state_store.fget(self._server)  # type: ignore[attr-defined]
        return getattr(self._store, name)


def defer_state_store(server: FastMCP) -> None:
    """Build *server*'s session-state store on its first write (:class:`StateStoreOnFirstWrite`).

    Only for fastmcp's own in-memory store: one given as ``session_state_store`` may hold
    values written elsewhere."""
    if server._state_storage is None:
        server._FastMCP__state_store = StateStoreOnFirstWrite(server)  # type: ignore[attr-defined]


def add_server_middleware(server: FastMCP, middleware: Any) -> None:
    """Put *middleware* first in the mcp SDK server's chain (``Server.middleware``, provisional).

    It then sees every request before fastmcp does, raw params and all, and may
    answer it itself without calling the rest of the chain.
    """
    server._mcp_server.middleware.insert(0, middleware)


def remove_provider(server: FastMCP, provider: Provider) -> None:
    """Unmount *provider* (``FastMCP.providers`` is a plain list; fastmcp has no remove call)."""
    server.providers.remove(provider)


def own_uri(namespace: str | None, uri: str) -> str:
    """*uri* as a server mounted under *namespace* names it: fastmcp's ``Namespace`` transform
    exposes ``scheme://path`` as ``scheme://namespace/path`` (``Namespace._reverse_uri``)."""
    if not namespace:
        return uri
    return Namespace(namespace)._reverse_uri(uri) or uri


def own_name(namespace: str | None, name: str) -> str:
    """*name* as a server mounted under *namespace* names it (``Namespace._reverse_name``)."""
    if not namespace:
        return name
    return Namespace(namespace)._reverse_name(name) or name


def exposed_uri(namespace: str | None, uri: str) -> str:
    """*uri* of a server mounted under *namespace* as the root exposes it
    (``Namespace._transform_uri``: ``scheme://path`` becomes ``scheme://namespace/path``)."""
    return Namespace(namespace)._transform_uri(uri) if namespace else uri


def template_matches(uri_template: str, uri: str) -> bool:
    """Whether *uri* is one of *uri_template*'s, as fastmcp matches a read to a template
    (``match_uri_template``, RFC 6570)."""
    return match_uri_template(uri, uri_template) is not None


def request_sources() -> tuple[Any, Any, Any]:
    """(the ``_meta``, the HTTP request's headers, the MCP server session) of the request
    fastmcp is serving, each None when absent (``fastmcp_request_ctx``: the SDK hands handlers
    their context as an argument; fastmcp keeps it in this context variable)."""
    ctx = fastmcp_request_ctx.get()
    if ctx is None:
        return None, None, None
    return ctx.meta, getattr(ctx.request, "headers", None), ctx.session


@contextmanager
def outside_requests() -> Iterator[None]:
    """Code under it (and every task it starts) serves no request: ``fastmcp_request_ctx`` unset.

    A task inherits the context it was started in; one started while a request was served
    (a client's own upstream session, opened by its first request) would otherwise take that
    request for its own in everything it runs later."""
    token = fastmcp_request_ctx.set(None)
    try:
        yield
    finally:
        fastmcp_request_ctx.reset(token)


def client_log_level(session: Any) -> str | None:
    """The least level the client of *session* asked for with ``logging/setLevel``, or None.

    fastmcp keeps it in the connection's ``state`` (``context._get_client_log_level``);
    a server's own log messages passed on by the launcher follow the same level.
    """
    return _get_client_log_level(session)


def namespaced_name(namespace: str | None, name: str) -> str:
    """*name* as fastmcp's ``Namespace`` transform exposes it (``Namespace._transform_name``)."""
    return Namespace(namespace)._transform_name(name) if namespace else name
