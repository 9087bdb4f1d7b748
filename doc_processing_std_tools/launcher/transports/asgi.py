"""ASGI pieces of the HTTP transport that the libraries do not provide.

Replies as one JSON body while keeping the SSE back-channel (:class:`PostReply`, the
response the SDK's transport builds for a POST), and plain ASGI middleware that :mod:`.http`
stacks around the composed server: a 400 for a missing Host header, the count of in-flight
requests a drain waits for, one access-log line per request (plain or JSON).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

import anyio
from anyio.abc import TaskGroup
from sse_starlette import EventSourceResponse

from .identity import caller_name

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

access_log = logging.getLogger("dpt-launch.access")

LOG_PEEK_BYTES = 64 * 1024  # request bytes the access log looks at for the MCP method
SESSION_HEADER = "mcp-session-id"


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


_SSE_ONLY_HEADERS = {"content-type", "cache-control", "connection", "x-accel-buffering"}


class PostReply:
    """The answer to one POST on the MCP endpoint: one JSON body when the call's first message
    is its reply, else the SSE stream the SDK would have sent (sse-starlette's).

    The SDK's transport answers every POST with sse-starlette's ``EventSourceResponse`` (built
    here instead: ``seams/http_sessions.py``), which starts five tasks per request (the stream,
    a ping timer, a shutdown watcher, the disconnect listener, the writer) and cancels four
    scopes; with JSON single replies that was about a quarter of the launcher's CPU per HTTP
    call (py-spy, ``benchmarks/peers.py``'s HTTP rows). Here a reply that comes first costs the
    writer's task alone: the connection's protocol (``header_guard.py``) tells of a client that
    leaves (:data:`LOST_SCOPE_KEY`), where a task waiting on ``receive()`` did (still there
    under another server). The JSON body also matters to clients: they limit one
    SSE event (the official ``mcp`` client: 1 MiB), so a big reply sent as an event never
    arrives, while ``application/json`` (which every client accepts on a POST) does. A call
    that first sends something else (progress, a log message, a request such as
    ``roots/list``) keeps its SSE stream, so the back-channel works as before; the SDK's
    ``json_response`` mode would drop that back-channel for every call.
    """

    def __init__(
        self,
        content: Any,
        sender: Callable[[], Coroutine[Any, Any, None]] | None,
        headers: dict[str, str],
    ) -> None:
        self.content, self.sender, self.headers = content, sender, headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        replied = False
        held: list[dict[str, Any]] = []  # events read before the first message (priming)
        assert self.sender is not None  # (without one: answer)
        async with anyio.create_task_group() as group:
            group.start_soon(self.sender)

            def left() -> None:
                if not replied:  # the client left: stop the call's writer, as sse-starlette does
                    group.cancel_scope.cancel()

            stop = tell_when_left(scope, receive, group, left)
            try:
                reply = await self._first_reply(held)
                if reply is not None:
                    replied = True
                    stop()
                    await send_json(send, reply, self.headers)
                    return  # the writer ends by itself after the reply
            finally:
                stop()
            await self._stream(held, scope, receive, send)
            group.cancel_scope.cancel()  # as sse-starlette ends its writer with the stream

    async def answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The same answer, the content written by someone else (no writer's task here, and
        no watch for a client that leaves: the writer's owner has it)."""
        held: list[dict[str, Any]] = []
        reply = await self._first_reply(held)
        if reply is not None:
            await send_json(send, reply, self.headers)
        else:
            await self._stream(held, scope, receive, send)

    async def _first_reply(self, held: list[dict[str, Any]]) -> bytes | None:
        """The reply when it is the content's first message (None: the stream it is), the
        events read on the way kept in *held*."""
        async for event in self.content:
            held.append(event)
            if not event.get("data"):
                continue  # a priming event: nothing for the client yet
            data = event["data"].encode()
            return data if _is_reply(data) else None
        return None

    async def _stream(
        self, held: list[dict[str, Any]], scope: Scope, receive: Receive, send: Send
    ) -> None:
        await EventSourceResponse(content=_chained(held, self.content), headers=self.headers)(
            scope, receive, send
        )


async def send_json(send: Send, data: bytes, headers: dict[str, str]) -> None:
    """*data* as one JSON body, with the SSE response's *headers* that apply to it."""
    fields = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in headers.items()
        if name.lower() not in _SSE_ONLY_HEADERS
    ]
    fields += [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(data)).encode()),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": fields})
    await send({"type": "http.response.body", "body": data, "more_body": False})


def tell_when_left(
    scope: Scope, receive: Receive, group: TaskGroup, left: Callable[[], None]
) -> Callable[[], None]:
    """Have *left* called if the client leaves (told by the connection's protocol where it
    is ours, :data:`LOST_SCOPE_KEY`; else by a task in *group* waiting on *receive*); what
    this returns stops that."""
    lost: LostConnection | None = scope.get(LOST_SCOPE_KEY)
    if lost is not None:
        return lost.tell(left)
    listening = anyio.CancelScope()
    group.start_soon(_until_disconnect, receive, listening, left)
    return listening.cancel


async def _until_disconnect(
    receive: Receive, listening: anyio.CancelScope, left: Callable[[], None]
) -> None:
    with listening:
        while (await receive())["type"] != "http.disconnect":
            pass
        left()


async def _chained(first: list[dict[str, Any]], rest: Any) -> AsyncIterator[dict[str, Any]]:
    for event in first:
        yield event
    async for event in rest:
        yield event


def _is_reply(data: bytes) -> bool:
    """True for a JSON-RPC response or error (not a request or a notification)."""
    try:
        message = json.loads(data)
    except ValueError:
        return False
    return isinstance(message, dict) and "id" in message and "method" not in message


# in a request's scope: called when its call is settled but its response stays open (a
# cancelled call's stream, held without a reply): the drain stops waiting for it, as for a GET
SETTLED_SCOPE_KEY = "dpt.settled"
# in a request's scope, put there by the connection's protocol (``header_guard.py``): its
# :class:`LostConnection`; who registers a callback there learns that the client's connection
# is lost without a task waiting on ``receive()`` (without it in the scope, such a task is needed)
LOST_SCOPE_KEY = "dpt.lost"
VETTED_MAX = 256  # (Host, Origin, server, scheme) verdicts of the Host/Origin guard remembered
VETTED_KEY_BYTES = 256  # Host and Origin bytes together past which a verdict is not remembered
# in a request's scope on its way through the Host/Origin guard: its verdict's key (absent when
# not to be remembered), so that its pass is remembered without reading its headers again
_VERDICT_SCOPE_KEY = "dpt.verdict"


class LostConnection:
    """Who to tell when a client's connection is lost (:data:`LOST_SCOPE_KEY`). The protocol
    calls :meth:`lose`; a callback registered after that (the connection lost between the
    request's headers and the app's watch) is called at once, not never."""

    def __init__(self) -> None:
        self.gone = False
        self.callbacks: set[Callable[[], None]] = set()

    def tell(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Have *callback* called when the connection is lost; what this returns stops that."""
        if self.gone:
            callback()
            return _nothing_to_stop
        self.callbacks.add(callback)
        return lambda: self.callbacks.discard(callback)

    def lose(self) -> None:
        self.gone = True
        callbacks, self.callbacks = self.callbacks, set()
        for callback in callbacks:
            callback()


def _nothing_to_stop() -> None:
    """(a watch that has already told)"""


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


_METHOD = re.compile(rb'"method"\s*:\s*"([^"\\]{1,100})"')
_NAME = re.compile(rb'"name"\s*:\s*"([^"\\]{1,100})"')
_SESSION = SESSION_HEADER.encode()


class Gate:
    """What every HTTP request passes before routing, in one ASGI layer (one pass over its
    headers, one wrapper of ``receive`` and one of ``send``), from the outside in:

    - one INFO line per request on ``dpt-launch.access``: method, path, MCP method, tool,
      status, duration, session id and the caller (a JWT's subject, ``token-N`` for a static
      token); never arguments, headers or tokens: the MCP method and tool name are read from
      the first bytes of the body, and nothing else of it is kept;
    - with *requests*, the drain's count (requests other than GET) and a cancel scope per
      request that shutdown cancels, its response then ended cleanly (503 when not started);
    - a 400 for a request without a Host header (fastmcp's guard would call it misdirected, 421);
    - *guard*, fastmcp's Host/Origin guard (DNS-rebinding protection: 421, 403). Its verdict
      depends only on the Host and Origin headers, the server's address and the scheme: a
      request the guard let through lets the next with the same four skip its parsing. At
      most :data:`VETTED_MAX` passes are remembered, the least recently used forgotten first,
      and only those whose Host and Origin are short (:data:`VETTED_KEY_BYTES`): the guard
      passes many variants (any loopback Origin, whatever its path), so a flood of them, sent
      before auth, holds little; it may push the real host out, which then costs that host one
      parse on its next request, never a refusal. Refusals are never remembered.

    (Five ASGI layers before, each with its own wrappers: about a ninth of the launcher's CPU
    per relayed HTTP call, ``benchmarks/http_relay.py --profile``.)
    """

    def __init__(
        self,
        app: ASGIApp,
        guard: Callable[[ASGIApp], ASGIApp],
        requests: InFlight | None = None,
    ) -> None:
        self.app, self.requests = app, requests
        self.guard = guard(self._vetted)
        self.vetted: OrderedDict[tuple[Any, ...], None] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        logged = access_log.isEnabledFor(logging.INFO)
        start = time.perf_counter() if logged else 0.0
        host = origin = session = None
        named_host = False
        for name, value in scope["headers"]:
            if name == b"host":
                host = value if host is None else host
                named_host = named_host or bool(value.strip())
            elif name == b"origin":
                origin = value if origin is None else origin
            elif name == _SESSION:
                session = value if session is None else session
        head = bytearray()
        response: dict[str, Any] = {"status": None, "session": session, "done": False}

        async def gated_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                response["status"] = message["status"]
                if logged and not response["session"]:
                    for name, value in message.get("headers", ()):
                        if name.lower() == _SESSION:
                            response["session"] = value
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                response["done"] = True
            await send(message)

        async def peeking_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(head) < LOG_PEEK_BYTES:
                head.extend(message.get("body", b"")[: LOG_PEEK_BYTES - len(head)])
            return message

        inner_receive = peeking_receive if logged else receive
        try:
            if self.requests is None:
                await self._next(scope, host, origin, named_host)(scope, inner_receive, gated_send)
            else:
                await self._counted(
                    scope, inner_receive, gated_send, response, host, origin, named_host
                )
        finally:
            if logged:
                _log_access(scope, bytes(head), response, start)

    async def _counted(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        response: dict[str, Any],
        host: bytes | None,
        origin: bytes | None,
        named_host: bool,
    ) -> None:
        """The request counted for the drain, in a cancel scope shutdown cancels."""
        requests = self.requests
        assert requests is not None
        counted = scope["method"] != "GET"

        def settled() -> None:
            nonlocal counted
            if counted:
                counted = False
                requests.calls -= 1

        requests.calls += counted
        scope[SETTLED_SCOPE_KEY] = settled
        with anyio.CancelScope() as cancel:
            requests.scopes.add(cancel)
            try:
                await self._next(scope, host, origin, named_host)(scope, receive, send)
            finally:
                requests.scopes.discard(cancel)
                settled()
        if cancel.cancelled_caught and not response["done"]:
            with contextlib.suppress(Exception):
                if response["status"] is None:
                    await _plain(send, 503, "Service Unavailable: the server is shutting down")
                else:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _next(
        self, scope: Scope, host: bytes | None, origin: bytes | None, named_host: bool
    ) -> ASGIApp:
        """Who serves the request past the drain's count: a 400, the guard, or (a verdict
        remembered) the app. (Chosen here, not awaited through one more coroutine.)"""
        if not named_host:
            return _missing_host
        assert host is not None  # (named_host)
        if len(host) + (len(origin) if origin is not None else 0) > VETTED_KEY_BYTES:
            return self.guard  # (not to be remembered: no key in the scope)
        key = _verdict_key(scope, host, origin)
        if key in self.vetted:
            self.vetted.move_to_end(key)
            return self.app
        scope[_VERDICT_SCOPE_KEY] = key
        return self.guard

    async def _vetted(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Past the guard: its verdict remembered for the same four (the key :meth:`_next`
        put in the scope), the least recently used forgotten past :data:`VETTED_MAX`."""
        key = scope.pop(_VERDICT_SCOPE_KEY, None)
        if key is not None:
            self.vetted[key] = None
            if len(self.vetted) > VETTED_MAX:
                self.vetted.popitem(last=False)
        await self.app(scope, receive, send)


def _verdict_key(scope: Scope, host: bytes | None, origin: bytes | None) -> tuple[Any, ...]:
    """What the Host/Origin guard's verdict depends on (the ASGI server address may be a list)."""
    server = scope.get("server")
    return (host, origin, tuple(server) if server is not None else None, scope.get("scheme"))


async def _missing_host(_scope: Scope, _receive: Receive, send: Send) -> None:
    await _plain(send, 400, "Bad Request: missing Host header")


def _log_access(scope: Scope, head: bytes, response: dict[str, Any], start: float) -> None:
    mcp_method, tool = mcp_method_and_tool(head)
    session = response["session"]
    entry = {
        "method": scope["method"],
        "path": scope["path"],
        "mcp_method": mcp_method,
        "tool": tool,
        "status": response["status"],
        "duration_ms": round((time.perf_counter() - start) * 1000, 1),
        "session": session.decode("latin-1") if session is not None else None,
        "user": caller_name(scope),  # set in the scope by the auth middleware inside
    }
    access_log.info(
        "%s %s %s%s %s %.1fms session=%s user=%s",
        entry["method"],
        entry["path"],
        mcp_method or "-",
        f" {tool}" if tool else "",
        entry["status"] or "-",
        entry["duration_ms"],
        entry["session"] or "-",
        entry["user"] or "-",
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
    """One JSON object per line (``transport.log_format: json``); access lines carry their
    fields."""

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
