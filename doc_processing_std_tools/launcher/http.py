"""The HTTP transport: a hardened ASGI app around the composed server, and its uvicorn server.

Most pieces come from the libraries (each named where it is used):

- fastmcp's ``HostOriginGuardMiddleware`` (strict mode) refuses foreign Host (421)
  and Origin (403) headers: DNS-rebinding protection;
- fastmcp's ``TokenVerifier`` + ``RequireAuthMiddleware`` do bearer tokens (401 with
  ``WWW-Authenticate: Bearer``); our verifier compares in constant time;
- the mcp SDK's ``StreamableHTTPSessionManager`` caps request bodies (413) and open
  sessions (503), and expires idle sessions;
- uvicorn caps connections (503) and closes idle keep-alive connections.

Written here because the libraries fall short: replies as one JSON body while keeping
the SSE back-channel (:class:`SingleReplyAsJson`), a 400 for a missing Host header (the
guard answers 421), a timeout for clients that trickle their request headers (uvicorn
waits for ever), ``/health`` and ``/ready``, one access line per request, and a drain
on SIGTERM/SIGINT that lets in-flight calls finish and then closes open streams
cleanly (uvicorn alone waits for streams until its timeout, then cancels with a
traceback).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import re
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

import anyio

from .config import TransportConfig
from .seams import additional_http_routes, lifespan_manager, low_level_server

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from .compose import Composition

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("dpt-launch")
access_log = logging.getLogger("dpt-launch.access")

FD_RESERVE = 64  # descriptors kept free for files, pipes and children
LOG_PEEK_BYTES = 64 * 1024  # request bytes the access log looks at for the MCP method
SESSION_HEADER = "mcp-session-id"


# -- serving -------------------------------------------------------------------


async def serve_http(
    composition: Composition, transport: TransportConfig, listener: socket.socket
) -> None:
    """Serve until SIGTERM/SIGINT; then drain in-flight calls for ``shutdown_grace`` seconds."""
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
    app = build_app(composition, transport, requests)
    config = uvicorn.Config(
        app,
        lifespan="on",
        http=slow_header_guard(transport.header_timeout),
        # uvicorn counts the connection asking too: +1 so that max_connections are served.
        limit_concurrency=max_connections + 1,
        timeout_keep_alive=transport.idle_timeout,  # type: ignore[arg-type]  # a float works
        # Our drain stops requests at shutdown_grace; this is only the backstop.
        timeout_graceful_shutdown=int(transport.shutdown_grace) + 5,
        log_config=None,  # keep dpt-launch's logging setup
        access_log=False,  # AccessLog below writes one line per request
    )
    server = quiet_signal_server(config)
    async with anyio.create_task_group() as group:
        group.start_soon(_stop_on_signal, server, requests, transport.shutdown_grace)
        async with lifespan_manager(composition.root):
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


def slow_header_guard(timeout: float) -> type:
    """uvicorn's h11 protocol, closing connections that do not send request headers in time.

    uvicorn's keep-alive timer only runs between requests and stops at the first
    byte, so a client trickling its headers holds a connection (and a descriptor)
    for ever. Here every connection gets *timeout* seconds, from connecting or from
    its previous response, to finish the next request's headers.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class SlowHeaderGuard(H11Protocol):
        _header_timer: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the headers are complete
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(timeout, self._expire)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expire(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                log.info("closed a connection that sent no request headers within %gs", timeout)
                self.transport.close()

    return SlowHeaderGuard


# -- the app -------------------------------------------------------------------


def build_app(
    composition: Composition, transport: TransportConfig, requests: InFlight | None = None
) -> Starlette:
    """The ASGI app: guards, auth, /health, /ready and the MCP endpoint."""
    from fastmcp.server.auth.middleware import RequireAuthMiddleware
    from fastmcp.server.http import (
        HostOriginGuardMiddleware,
        StreamableHTTPASGIApp,
        create_base_app,
    )
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.middleware import Middleware
    from starlette.routing import Route

    root = composition.root
    sessions = StreamableHTTPSessionManager(
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
    verifier = static_bearer_tokens(transport.tokens) if transport.tokens else None

    def protected(endpoint: ASGIApp) -> ASGIApp:
        if verifier is None:
            return endpoint
        return RequireAuthMiddleware(endpoint, required_scopes=[])

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
        *(verifier.get_middleware() if verifier else []),
    ]
    routes = [
        Route("/health", endpoint=_health, methods=["GET"]),
        Route("/ready", endpoint=protected(Readiness(composition)), methods=["GET"]),
        Route(
            transport.path,
            endpoint=protected(mcp_endpoint),
            methods=["POST", "DELETE"] if transport.stateless else None,
        ),
        *additional_http_routes(root),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with sessions.run():
            yield

    app = create_base_app(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.fastmcp_server = root
    app.state.path = transport.path
    app.state.transport_type = "streamable-http"
    app.state.sessions = sessions
    return app


def static_bearer_tokens(tokens: list[str]) -> Any:
    """A fastmcp ``TokenVerifier`` for fixed tokens, compared in constant time.

    (fastmcp's ``StaticTokenVerifier`` looks tokens up in a dict: not constant-time.)
    """
    from fastmcp.server.auth import AccessToken, TokenVerifier

    expected = [token.encode() for token in tokens]

    class StaticBearerTokens(TokenVerifier):
        async def verify_token(self, token: str) -> AccessToken | None:
            given = token.strip().encode()
            matches = [hmac.compare_digest(given, candidate) for candidate in expected]
            if not any(matches):
                return None
            # The client id names the token by position: a session stays with its token.
            return AccessToken(token=token, client_id=f"token-{matches.index(True) + 1}", scopes=[])

    return StaticBearerTokens()


async def _health(_request: Any) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"status": "ok"})


class Readiness:
    """``GET /ready``: 200 when every required server is up, else 503, with each server's state."""

    def __init__(self, composition: Composition) -> None:
        self.composition = composition

    def states(self) -> dict[str, dict[str, Any]]:
        """Each server's state: mounted ones live; a skipped external one ``failed``, others ``skipped``."""
        servers: dict[str, dict[str, Any]] = {}
        for mount in self.composition.mounts:
            servers[mount.name] = {"state": mount.state, "required": mount.entry.required}
        entries = self.composition.loaded.config.servers
        for name, why in self.composition.skipped:
            entry = entries.get(name)
            state = "failed" if entry is not None and entry.external else "skipped"
            required = bool(entry and entry.required)
            servers[name] = {"state": state, "required": required, "reason": why}
        return servers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.responses import JSONResponse

        servers = self.states()
        ready = all(s["state"] == "up" for s in servers.values() if s["required"])
        body = {"status": "ready" if ready else "not ready", "servers": servers}
        await JSONResponse(body, status_code=200 if ready else 503)(scope, receive, send)


# -- middleware ------------------------------------------------------------------


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class RequireHostHeader:
    """400 for a request without a Host header (fastmcp's guard would call it misdirected, 421)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not any(
            name == b"host" and value.strip() for name, value in scope["headers"]
        ):
            await _plain(send, 400, "Bad Request: missing Host header")
            return
        await self.app(scope, receive, send)


_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_SSE_ONLY_HEADERS = {b"content-type", b"cache-control", b"connection", b"x-accel-buffering"}


class SingleReplyAsJson:
    """Turns a POST's SSE stream into one JSON body when the reply is its only message.

    Clients limit one SSE event (the official ``mcp`` client: 1 MiB), so a big reply
    sent as an event never arrives; as ``application/json`` (which every client
    accepts on a POST) it does. A call that first sends something else (progress,
    a log message, a request such as ``roots/list``) keeps its SSE stream, so the
    back-channel works as before. The SDK's ``json_response`` mode would drop that
    back-channel for every call, hence this middleware.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        held: Message | None = None  # the SSE response start, not sent yet
        raw = bytearray()  # the body so far, while undecided
        parsed = 0  # bytes of *raw* already read as events
        mode = "undecided"  # then "sse" (pass through) or "json" (reply sent)

        async def pass_through() -> None:
            nonlocal mode
            mode = "sse"
            await send(held)  # type: ignore[arg-type]
            await send({"type": "http.response.body", "body": bytes(raw), "more_body": True})

        async def intercept(message: Message) -> None:
            nonlocal held, parsed, mode
            if mode == "sse":
                await send(message)
                return
            if mode == "json":
                return  # the rest of the stream (its end) is already answered
            if message["type"] == "http.response.start":
                start_headers = dict(message.get("headers", []))
                if start_headers.get(b"content-type", b"").startswith(b"text/event-stream"):
                    held = message
                else:
                    mode = "sse"
                    await send(message)
                return
            if held is None:  # pragma: no cover - body before start
                await send(message)
                return
            raw.extend(message.get("body", b""))
            while match := _EVENT_END.search(raw, parsed):
                event, parsed = bytes(raw[parsed : match.start()]), match.end()
                data = _sse_data(event)
                if data is None:
                    continue  # a comment or a priming event: nothing for the client yet
                if _is_reply(data):
                    mode = "json"
                    headers = [
                        (k, v)
                        for k, v in held.get("headers", [])
                        if k.lower() not in _SSE_ONLY_HEADERS
                    ]
                    headers += [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(data)).encode()),
                    ]
                    await send(
                        {
                            "type": "http.response.start",
                            "status": held["status"],
                            "headers": headers,
                        }
                    )
                    await send({"type": "http.response.body", "body": data, "more_body": False})
                else:
                    await pass_through()
                return
            if not message.get("more_body", False):
                await pass_through()
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app(scope, receive, intercept)


def _sse_data(event: bytes) -> bytes | None:
    """The data of one SSE event, or None when it has none."""
    lines = [line for line in re.split(rb"\r\n|\n|\r", event) if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[6:] if line.startswith(b"data: ") else line[5:] for line in lines)


def _is_reply(data: bytes) -> bool:
    """True for a JSON-RPC response or error (not a request or a notification)."""
    try:
        message = json.loads(data)
    except ValueError:
        return False
    return isinstance(message, dict) and "id" in message and "method" not in message


class InFlight:
    """The requests being served, so that shutdown can wait for calls and end streams."""

    def __init__(self) -> None:
        self.calls = 0  # requests other than GET (GET on the MCP path is a long-lived stream)
        self.scopes: set[anyio.CancelScope] = set()

    async def wait_for_calls(self) -> None:
        while self.calls:
            await anyio.sleep(0.05)

    def cancel_all(self) -> None:
        for scope in list(self.scopes):
            scope.cancel()


class InFlightTracker:
    """Runs each request in a cancel scope that shutdown can cancel; then ends its response cleanly."""

    def __init__(self, app: ASGIApp, requests: InFlight) -> None:
        self.app = app
        self.requests = requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_call = scope["method"] != "GET"
        response = {"started": False, "done": False}

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                response["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                response["done"] = True
            await send(message)

        self.requests.calls += is_call
        with anyio.CancelScope() as cancel:
            self.requests.scopes.add(cancel)
            try:
                await self.app(scope, receive, tracked_send)
            finally:
                self.requests.scopes.discard(cancel)
                self.requests.calls -= is_call
        if cancel.cancelled_caught and not response["done"]:
            with contextlib.suppress(Exception):
                if not response["started"]:
                    await _plain(send, 503, "Service Unavailable: the server is shutting down")
                else:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})


_METHOD = re.compile(rb'"method"\s*:\s*"([^"\\]{1,100})"')
_NAME = re.compile(rb'"name"\s*:\s*"([^"\\]{1,100})"')


class AccessLog:
    """One INFO line per request: method, path, MCP method, tool, status, duration, session id.

    Never arguments, headers or tokens: the MCP method and tool name are read from
    the first bytes of the body, and nothing else of it is kept.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not access_log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        head = bytearray()
        fields: dict[str, Any] = {"status": None, "session": None}
        for name, value in scope["headers"]:
            if name == SESSION_HEADER.encode():
                fields["session"] = value.decode("latin-1")

        async def peeking_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(head) < LOG_PEEK_BYTES:
                head.extend(message.get("body", b"")[: LOG_PEEK_BYTES - len(head)])
            return message

        async def status_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                fields["status"] = message["status"]
                for name, value in message.get("headers", []):
                    if name.lower() == SESSION_HEADER.encode() and not fields["session"]:
                        fields["session"] = value.decode("latin-1")
            await send(message)

        try:
            await self.app(scope, peeking_receive, status_send)
        finally:
            mcp_method, tool = mcp_method_and_tool(bytes(head))
            entry = {
                "method": scope["method"],
                "path": scope["path"],
                "mcp_method": mcp_method,
                "tool": tool,
                "status": fields["status"],
                "duration_ms": round((time.perf_counter() - start) * 1000, 1),
                "session": fields["session"],
            }
            access_log.info(
                "%s %s %s%s %s %.1fms session=%s",
                entry["method"],
                entry["path"],
                mcp_method or "-",
                f" {tool}" if tool else "",
                entry["status"] or "-",
                entry["duration_ms"],
                entry["session"] or "-",
                extra={"access": entry},
            )


def mcp_method_and_tool(head: bytes) -> tuple[str | None, str | None]:
    """The JSON-RPC method (and tool name for tools/call) from the start of a request body."""
    if not head:
        return None, None
    method_match = _METHOD.search(head)
    method = method_match.group(1).decode("utf-8", "replace") if method_match else None
    tool = None
    if method == "tools/call":
        name_match = _NAME.search(head)
        tool = name_match.group(1).decode("utf-8", "replace") if name_match else None
    return method, tool


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line (``transport.log_format: json``); access lines carry their fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "access", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def use_json_logs() -> None:
    """Switch every root handler to :class:`JsonLogFormatter`."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(JsonLogFormatter())
