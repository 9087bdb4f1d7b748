"""The HTTP transport: a hardened ASGI app around the composed server, and its uvicorn server.

Most pieces come from the libraries (each named where it is used):

- fastmcp's ``HostOriginGuardMiddleware`` (strict mode) refuses foreign Host (421)
  and Origin (403) headers: DNS-rebinding protection;
- fastmcp's ``TokenVerifier`` + ``RequireAuthMiddleware`` do bearer tokens (401 with
  ``WWW-Authenticate: Bearer``): static ones compared in constant time, and JWTs from
  the team's identity provider (fastmcp's ``JWTVerifier``; see :mod:`.auth`);
- the mcp SDK's ``StreamableHTTPSessionManager`` caps request bodies (413) and open
  sessions (503), and expires idle sessions;
- uvicorn caps connections (503) and closes idle keep-alive connections.

Written here because the libraries fall short (the ASGI middleware is in :mod:`.asgi`):
replies as one JSON body while keeping the SSE back-channel, a 400 for a missing Host
header (the guard answers 421), a timeout for clients that trickle their request headers (uvicorn
waits for ever), ``/health`` and ``/ready``, one access line per request, and a drain
on SIGTERM/SIGINT that lets in-flight calls finish and then closes open streams
cleanly (uvicorn alone waits for streams until its timeout, then cancels with a
traceback).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import uvicorn
from fastmcp.server.http import HostOriginGuardMiddleware, StreamableHTTPASGIApp, create_base_app
from mcp.server.transport_security import TransportSecuritySettings
from starlette.middleware import Middleware
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ...locking.fleet_lock import client_url
from ...seams.fastmcp_server import additional_http_routes, lifespan_manager, low_level_server
from ...seams.http_sessions import open_http_sessions, session_manager
from ..calls.access import Access
from ..config.transport import TransportConfig
from .asgi import ASGIApp, Gate, InFlight, PostReply, Receive, Scope, Send
from .auth import IncomingAuth
from .console import ConsoleSources
from .header_guard import slow_header_guard
from .http_fast_path import HttpFastPath, Tables
from .identity import scope_caller
from .session_binding import PROFILE_SCOPE_KEY, SessionEndpoints
from .wire_errors import invalid_request

if sys.platform != "win32":
    import resource

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastmcp import FastMCP
    from starlette.applications import Starlette

    from ...telemetry import Metrics
    from ..external.client_requests import Fronts

    # each server's state for ``/ready``: {name: {"state", "required"[, "reason"]}}
    ServerStates = Callable[[], dict[str, dict[str, Any]]]

log = logging.getLogger("dpt-launch")

FD_RESERVE = 64  # descriptors kept free for files, pipes and children
# what the HTTP fast path needs: the client sessions, the tables of relayed tools per profile,
# and whether it can take any call now (asked per request: a reload may change the answer)
Relayed = tuple["Fronts", Tables, "Callable[[], bool]"]


# -- serving -------------------------------------------------------------------


async def serve_http(
    root: FastMCP,
    states: ServerStates,
    transport: TransportConfig,
    listener: socket.socket,
    profiles: Sequence[str] = (),
    metrics: Metrics | None = None,
    access: Access | None = None,
    default_profile: str | None = None,
    console: ConsoleSources | None = None,
    relayed: Relayed | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; then drain in-flight calls for ``shutdown_grace`` seconds.

    Each of *profiles* is served at ``<path>/NAME`` by the same server
    (``compose/profile_gate.py``).
    With *metrics*, ``GET /metrics`` shows them (and the open sessions and connections). With
    *access*, a profile's endpoint (and the plain one, serving *default_profile*) answers 403
    to a caller its rules do not let use the profile. With *console*, the operator console is
    served at ``/ui`` (:mod:`.console`). With *relayed* (the client sessions, the tables of
    relayed tools per profile, whether any can be taken), plain relayed calls take the HTTP fast
    path (:mod:`.http_fast_path`).
    """
    soft_limit = raise_open_file_limit()
    max_connections = transport.max_connections
    if soft_limit and max_connections > soft_limit - FD_RESERVE:
        max_connections = max(1, soft_limit - FD_RESERVE)
        log.warning(
            "max_connections lowered to %d: only %d file descriptors are allowed",
            max_connections,
            soft_limit,
        )
    requests = InFlight()
    app = build_app(
        root,
        states,
        transport,
        requests,
        profiles,
        metrics,
        access,
        default_profile,
        console,
        relayed,
    )
    config = uvicorn.Config(
        app,
        lifespan="on",
        http=slow_header_guard(  # type: ignore[arg-type]  # (an asyncio.Protocol subclass)
            transport.header_timeout,
            tokens=transport.tokens,
            pending_timeout=transport.pending_header_timeout,
            max_pending=max(1, max_connections // 2),
            per_client=transport.max_connections_per_client,
        ),
        # uvicorn counts the connection asking too: +1 so that max_connections are served.
        limit_concurrency=max_connections + 1,
        timeout_keep_alive=transport.idle_timeout,  # type: ignore[arg-type]  # a float works
        # Our drain stops requests at shutdown_grace; this is only the backstop.
        timeout_graceful_shutdown=int(transport.shutdown_grace) + 5,
        # No websockets served: an upgrade would hand the connection to another protocol and
        # the header guard would never see it end (its client's connection count leaked).
        ws="none",
        log_config=None,  # keep dpt-launch's logging setup
        access_log=False,  # Gate (asgi.py) writes one line per request
    )
    server = QuietSignalServer(config)
    if metrics is not None:
        metrics.gauges.connections = lambda: len(server.server_state.connections)
    async with anyio.create_task_group() as group:
        group.start_soon(_stop_on_signal, server, requests, transport.shutdown_grace)
        async with lifespan_manager(root):
            await server.serve(sockets=[listener])
        group.cancel_scope.cancel()


class QuietSignalServer(uvicorn.Server):
    """uvicorn's Server without its own signal handlers: :func:`_stop_on_signal` drives shutdown.

    (uvicorn's handlers would re-raise the signal after shutdown: no clean exit status.)
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _stop_on_signal(server: Any, requests: InFlight, grace: float) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if server.should_exit:
                # A second signal (or the same one sent to the whole process group):
                # stop waiting for calls, but still shut down in order. (uvicorn's
                # force_exit would skip the lifespan shutdown and print a traceback.)
                requests.cancel_all()
                continue
            log.info(
                "received %s, shutting down (in-flight calls get %gs)",
                signal.Signals(signum).name,
                grace,
            )
            server.should_exit = True  # uvicorn stops accepting and closes idle connections
            with anyio.move_on_after(grace):
                await requests.wait_for_calls()
            requests.cancel_all()  # open streams, and calls past the grace period


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the soft limit now in force."""
    if sys.platform == "win32":  # pragma: no cover
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # e.g. macOS caps below the hard limit
            log.debug("cannot raise RLIMIT_NOFILE to %s", target, exc_info=True)
    return 0 if soft == resource.RLIM_INFINITY else soft


# -- the app -------------------------------------------------------------------


def build_app(
    root: FastMCP,
    states: ServerStates,
    transport: TransportConfig,
    requests: InFlight | None = None,
    profiles: Sequence[str] = (),
    metrics: Metrics | None = None,
    access: Access | None = None,
    default_profile: str | None = None,
    console: ConsoleSources | None = None,
    relayed: Relayed | None = None,
) -> Starlette:
    """The ASGI app: guards, auth, /health, /ready, /metrics (with *metrics*) and the MCP
    endpoint (and one per profile, ``<path>/NAME``: the same endpoint, its requests tagged
    with the profile's name); with *console*, the operator console at ``/ui``; with *relayed*,
    the HTTP fast path of relayed calls at the endpoint (:mod:`.http_fast_path`)."""
    sessions = session_manager(
        event_store=event_store(transport),
        app=low_level_server(root),
        json_response=transport.json_response,
        stateless=transport.stateless,
        session_idle_timeout=transport.session_idle_timeout,
        max_sessions=transport.max_sessions,
        max_request_body_size=transport.max_body_bytes,
        # The Host/Origin guard below covers every route, so the SDK's own is off.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        post_reply=PostReply,  # (json_response: the SDK answers in JSON itself)
        invalid_request=invalid_request,  # (stdio's: one line, no library URLs)
    )

    mcp_endpoint: ASGIApp = StreamableHTTPASGIApp(sessions)
    # (stateless, JSON-response and event-store sessions are never the fast path's: with one of
    # them no request's body is read here for nothing)
    if relayed is not None and not (
        transport.stateless or transport.json_response or transport.event_store is not None
    ):
        fronts, tables, taking = relayed
        fast = HttpFastPath(mcp_endpoint, sessions, fronts, tables)
        mcp_endpoint = FastPathWhile(fast, mcp_endpoint, taking)
    if profiles:  # (a session is used only at the endpoint that opened it)
        mcp_endpoint = SessionEndpoints(mcp_endpoint)
    auth = IncomingAuth(transport, resource_name=root.name)
    protected = auth.protected
    ui = _console(console, auth, transport) if console is not None else None

    def profile_endpoint(app: ASGIApp, profile: str | None) -> ASGIApp:
        if access is None or profile is None:
            return app
        return ProfileAccess(app, profile, access)

    def host_origin_guard(app: ASGIApp) -> ASGIApp:
        return HostOriginGuardMiddleware(
            app,
            allowed_hosts=transport.allowed_hosts,
            allowed_origins=transport.allowed_origins,
            mode="strict",
        )

    middleware = [
        Middleware(Gate, guard=host_origin_guard, requests=requests),
        *auth.middleware(),
    ]
    routes = [
        Route("/health", endpoint=_health, methods=["GET"]),
        Route("/ready", endpoint=protected(Readiness(states)), methods=["GET"]),
        *(
            [Route("/metrics", endpoint=protected(Exposition(metrics)), methods=["GET"])]
            if metrics is not None
            else []
        ),
        Route(
            transport.path,
            endpoint=protected(profile_endpoint(mcp_endpoint, default_profile)),
            methods=["POST", "DELETE"] if transport.stateless else None,
        ),
        *auth.routes(),
        *(ui.routes() if ui is not None else []),
        *(
            Route(
                f"{transport.path.rstrip('/')}/{name}",
                endpoint=protected(profile_endpoint(ProfileTag(mcp_endpoint, name), name)),
                methods=["POST", "DELETE"] if transport.stateless else None,
            )
            for name in profiles
        ),
        *additional_http_routes(root),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with sessions.run(), ui.running() if ui is not None else contextlib.nullcontext():
            yield

    if metrics is not None:
        metrics.gauges.sessions = lambda: open_http_sessions(sessions)
    app = create_base_app(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.fastmcp_server = root
    app.state.path = transport.path
    app.state.transport_type = "streamable-http"
    app.state.sessions = sessions
    return app


def _console(console: ConsoleSources, auth: IncomingAuth, transport: TransportConfig) -> Any:
    """The console at ``/ui`` (docs/ui.md): its routes, and what runs while it is served."""
    # Imported here, only for an HTTP app: Jinja2 and the console's pages add ~50 ms
    # (python -X importtime) to every launcher's start, stdio ones included.
    from .console.pages import console_app

    return console_app(console, auth.verifier, transport.path)


def event_store(transport: TransportConfig) -> Any:
    """fastmcp's ``EventStore`` on the Redis of ``transport.event_store``, or None (no replay).

    With it, a client whose SSE stream broke reconnects with ``Last-Event-ID`` and gets the
    events it missed. The session still lives in one launcher: behind a balancer, keep it sticky.
    """
    config = transport.event_store
    if config is None:
        return None
    # Imported here, only when an event store is configured: these two bring the Redis
    # key-value store, ~0.5 s (python -X importtime) on top of the rest of the transport.
    from fastmcp.server.event_store import EventStore
    from key_value.aio.stores.redis import RedisStore

    return EventStore(
        storage=RedisStore(url=client_url(config.url)),
        max_events_per_stream=config.max_events_per_stream,
        ttl=config.ttl,
    )


class FastPathWhile:
    """The MCP endpoint through the HTTP fast path while it can take a call (*taking*) or has
    calls in flight, else straight to the SDK's: with no ``sessions: per_client`` command no
    POST's body is read and replayed for nothing. Asked per request, so a reload that adds or
    removes one decides again; a call the fast path took before a reload removed the last one
    is still cancelled there (``notifications/cancelled`` reaches it)."""

    def __init__(self, fast: HttpFastPath, plain: ASGIApp, taking: Callable[[], bool]) -> None:
        self.fast, self.plain, self.taking = fast, plain, taking

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fast = self.fast
        await (fast if self.taking() or fast.in_flight() else self.plain)(scope, receive, send)


class ProfileTag:
    """The MCP endpoint, telling the server which profile the request's path names."""

    def __init__(self, app: ASGIApp, name: str) -> None:
        self.app, self.name = app, name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[PROFILE_SCOPE_KEY] = self.name
        await self.app(scope, receive, send)


class ProfileAccess:
    """A profile's MCP endpoint, opened only by the callers ``access:`` lets use the profile:
    any other request is answered 403 with one line, whatever session it names."""

    def __init__(self, app: ASGIApp, profile: str, access: Access) -> None:
        self.app, self.profile, self.access = app, profile, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.access.profile_refusal(scope_caller(scope), self.profile)
            if refusal is not None:
                log.warning("%s", refusal)
                await PlainTextResponse(refusal, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _health(_request: Any) -> Any:
    return JSONResponse({"status": "ok"})


class Readiness:
    """``GET /ready``: 200 when every required server is up, else 503, with each server's state."""

    def __init__(self, states: ServerStates) -> None:
        self.states = states

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        servers = self.states()
        ready = all(s["state"] == "up" for s in servers.values() if s["required"])
        body = {"status": "ready" if ready else "not ready", "servers": servers}
        await JSONResponse(body, status_code=200 if ready else 503)(scope, receive, send)


class Exposition:
    """``GET /metrics``: the launcher's metrics in Prometheus text format."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body, content_type = self.metrics.render()
        await Response(body, media_type=content_type)(scope, receive, send)


# -- middleware ------------------------------------------------------------------
