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
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ...seams.fastmcp_server import additional_http_routes, lifespan_manager, low_level_server
from ...seams.http_sessions import open_http_sessions, session_manager
from ..config.transport import TransportConfig
from .asgi import (
    AccessLog,
    ASGIApp,
    InFlight,
    InFlightTracker,
    Receive,
    RequireHostHeader,
    Scope,
    Send,
    SingleReplyAsJson,
)
from .auth import IncomingAuth

if TYPE_CHECKING:
    from collections.abc import Callable

    from fastmcp import FastMCP
    from starlette.applications import Starlette

    from ...telemetry import Metrics

    # each server's state for ``/ready``: {name: {"state", "required"[, "reason"]}}
    ServerStates = Callable[[], dict[str, dict[str, Any]]]

log = logging.getLogger("dpt-launch")

FD_RESERVE = 64  # descriptors kept free for files, pipes and children


# -- serving -------------------------------------------------------------------


async def serve_http(
    root: FastMCP,
    states: ServerStates,
    transport: TransportConfig,
    listener: socket.socket,
    profiles: Sequence[str] = (),
    metrics: Metrics | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; then drain in-flight calls for ``shutdown_grace`` seconds.

    Each of *profiles* is served at ``<path>/NAME`` by the same server (``compose/profiles.py``).
    With *metrics*, ``GET /metrics`` shows them (and the open sessions and connections).
    """
    import uvicorn

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
    app = build_app(root, states, transport, requests, profiles, metrics)
    config = uvicorn.Config(
        app,
        lifespan="on",
        http=slow_header_guard(
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
        log_config=None,  # keep dpt-launch's logging setup
        access_log=False,  # AccessLog below writes one line per request
    )
    server = quiet_signal_server(config)
    if metrics is not None:
        metrics.gauges.connections = lambda: len(server.server_state.connections)
    async with anyio.create_task_group() as group:
        group.start_soon(_stop_on_signal, server, requests, transport.shutdown_grace)
        async with lifespan_manager(root):
            await server.serve(sockets=[listener])
        group.cancel_scope.cancel()


def quiet_signal_server(config: Any) -> Any:
    """uvicorn's Server without its own signal handlers: :func:`_stop_on_signal` drives shutdown.

    (uvicorn's handlers would re-raise the signal after shutdown: no clean exit status.)
    """
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(config)


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
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
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


def slow_header_guard(
    timeout: float,
    *,
    tokens: list[str] | None = None,
    pending_timeout: float | None = None,
    max_pending: int | None = None,
    per_client: int | None = None,
) -> type:
    """uvicorn's h11 protocol, closing connections that do not send request headers in time,
    and keeping connections that have not shown a valid token from crowding out those that have.

    uvicorn's keep-alive timer only runs between requests and stops at the first
    byte, so a client trickling its headers holds a connection (and a descriptor)
    for ever. Here every connection gets *timeout* seconds, from connecting or from
    its previous response, to finish the next request's headers.

    A connection is *pending* until a request on it completes its headers with one of
    *tokens* (any request, when there are none): pending ones get *pending_timeout* seconds
    instead; at most *max_pending* stay open (a newer one closes the oldest, so a flood of
    them cannot take uvicorn's ``limit_concurrency`` from clients that authenticate), and one
    client address keeps at most *per_client* connections open (429 and close beyond). This is
    done here, in the protocol, because a client that never finishes its headers never
    reaches an ASGI middleware.
    """
    import hmac
    from collections import Counter

    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    accepted = [f"Bearer {token}".encode() for token in tokens or []]
    short = min(timeout, pending_timeout) if pending_timeout is not None else timeout
    pending: dict[Any, None] = {}  # oldest first
    per_address: Counter[str] = Counter()

    def shows_token(headers: list[tuple[bytes, bytes]]) -> bool:
        if not accepted:
            return True
        given = next((value for name, value in headers if name == b"authorization"), b"")
        return any(hmac.compare_digest(given, token) for token in accepted)

    class SlowHeaderGuard(H11Protocol):
        _header_timer: Any = None
        _address: str | None = None
        _pending = False

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            address = self.client[0] if self.client else ""
            if per_client is not None and per_address[address] >= per_client:
                log.info("refused a connection: %s has %d open", address, per_client)
                transport.write(
                    b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 0\r\n"
                    b"connection: close\r\n\r\n"
                )
                transport.close()
                return
            self._address = address
            per_address[address] += 1
            self._pending = True
            pending[self] = None
            if max_pending is not None:
                while len(pending) > max_pending:
                    next(iter(pending))._evict()
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the headers are complete
                self._disarm()
                if self._pending and self.headers is not None and shows_token(self.headers):
                    self._pending = False
                    pending.pop(self, None)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            pending.pop(self, None)
            if self._address is not None:
                per_address[self._address] -= 1
                if per_address[self._address] <= 0:
                    del per_address[self._address]
                self._address = None
            super().connection_lost(exc)

        def _evict(self) -> None:
            pending.pop(self, None)
            self._disarm()
            log.info("closed the oldest connection that had shown no token (too many pending)")
            self.transport.close()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(
                short if self._pending else timeout, self._expire
            )

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expire(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                log.info(
                    "closed a connection that sent no request headers within %gs",
                    short if self._pending else timeout,
                )
                self.transport.close()

    return SlowHeaderGuard


# -- the app -------------------------------------------------------------------


def build_app(
    root: FastMCP,
    states: ServerStates,
    transport: TransportConfig,
    requests: InFlight | None = None,
    profiles: Sequence[str] = (),
    metrics: Metrics | None = None,
) -> Starlette:
    """The ASGI app: guards, auth, /health, /ready, /metrics (with *metrics*) and the MCP
    endpoint (and one per profile, ``<path>/NAME``: the same endpoint, its requests tagged
    with the profile's name)."""
    from fastmcp.server.http import (
        HostOriginGuardMiddleware,
        StreamableHTTPASGIApp,
        create_base_app,
    )
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.middleware import Middleware
    from starlette.routing import Route

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
    )

    mcp_endpoint: ASGIApp = StreamableHTTPASGIApp(sessions)
    if not transport.json_response:
        mcp_endpoint = SingleReplyAsJson(mcp_endpoint)  # an ASGI object: Starlette passes it raw
    auth = IncomingAuth(transport, resource_name=root.name)
    protected = auth.protected

    middleware = [
        Middleware(AccessLog),
        *([Middleware(InFlightTracker, requests=requests)] if requests else []),
        Middleware(RequireHostHeader),
        Middleware(
            HostOriginGuardMiddleware,
            allowed_hosts=transport.allowed_hosts,
            allowed_origins=transport.allowed_origins,
            mode="strict",
        ),
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
            endpoint=protected(mcp_endpoint),
            methods=["POST", "DELETE"] if transport.stateless else None,
        ),
        *auth.routes(),
        *(
            Route(
                f"{transport.path.rstrip('/')}/{name}",
                endpoint=protected(ProfileTag(mcp_endpoint, name)),
                methods=["POST", "DELETE"] if transport.stateless else None,
            )
            for name in profiles
        ),
        *additional_http_routes(root),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with sessions.run():
            yield

    if metrics is not None:
        metrics.gauges.sessions = lambda: open_http_sessions(sessions)
    app = create_base_app(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.fastmcp_server = root
    app.state.path = transport.path
    app.state.transport_type = "streamable-http"
    app.state.sessions = sessions
    return app


def event_store(transport: TransportConfig) -> Any:
    """fastmcp's ``EventStore`` on the Redis of ``transport.event_store``, or None (no replay).

    With it, a client whose SSE stream broke reconnects with ``Last-Event-ID`` and gets the
    events it missed. The session still lives in one launcher: behind a balancer, keep it sticky.
    """
    config = transport.event_store
    if config is None:
        return None
    from fastmcp.server.event_store import EventStore
    from key_value.aio.stores.redis import RedisStore

    from ...locking.fleet_lock import client_url

    return EventStore(
        storage=RedisStore(url=client_url(config.url)),
        max_events_per_stream=config.max_events_per_stream,
        ttl=config.ttl,
    )


PROFILE_SCOPE_KEY = "dpt.profile"  # read by compose/profile_gate.py's ProfileGate


class ProfileTag:
    """The MCP endpoint, telling the server which profile the request's path names."""

    def __init__(self, app: ASGIApp, name: str) -> None:
        self.app, self.name = app, name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[PROFILE_SCOPE_KEY] = self.name
        await self.app(scope, receive, send)


async def _health(_request: Any) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"status": "ok"})


class Readiness:
    """``GET /ready``: 200 when every required server is up, else 503, with each server's state."""

    def __init__(self, states: ServerStates) -> None:
        self.states = states

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.responses import JSONResponse

        servers = self.states()
        ready = all(s["state"] == "up" for s in servers.values() if s["required"])
        body = {"status": "ready" if ready else "not ready", "servers": servers}
        await JSONResponse(body, status_code=200 if ready else 503)(scope, receive, send)


class Exposition:
    """``GET /metrics``: the launcher's metrics in Prometheus text format."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.responses import Response

        body, content_type = self.metrics.render()
        await Response(body, media_type=content_type)(scope, receive, send)


# -- middleware ------------------------------------------------------------------
