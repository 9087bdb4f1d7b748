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
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

import anyio
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


_SSE_ONLY_HEADERS = {"content-type", "cache-control", "connection", "x-accel-buffering"}


class PostReply:
    """The answer to one POST on the MCP endpoint: one JSON body when the call's first message
    is its reply, else the SSE stream the SDK would have sent (sse-starlette's).

    The SDK's transport answers every POST with sse-starlette's ``EventSourceResponse`` (built
    here instead: ``seams/http_sessions.py``), which starts five tasks per request (the stream,
    a ping timer, a shutdown watcher, the disconnect listener, the writer) and cancels four
    scopes; with JSON single replies that was about a quarter of the launcher's CPU per HTTP
    call (py-spy, ``benchmarks/peers.py``'s HTTP rows). Here a reply that comes first costs the
    writer and a disconnect listener. The JSON body also matters to clients: they limit one
    SSE event (the official ``mcp`` client: 1 MiB), so a big reply sent as an event never
    arrives, while ``application/json`` (which every client accepts on a POST) does. A call
    that first sends something else (progress, a log message, a request such as
    ``roots/list``) keeps its SSE stream, so the back-channel works as before; the SDK's
    ``json_response`` mode would drop that back-channel for every call.
    """

    def __init__(
        self, content: Any, sender: Callable[[], Coroutine[Any, Any, None]], headers: dict[str, str]
    ) -> None:
        self.content, self.sender, self.headers = content, sender, headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        replied = False
        held: list[dict[str, Any]] = []  # events read before the first message (priming)
        async with anyio.create_task_group() as group:
            group.start_soon(self.sender)
            listening = anyio.CancelScope()

            async def until_disconnect() -> None:
                with listening:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    if (
                        not replied
                    ):  # the client left: stop the call's writer, as sse-starlette does
                        group.cancel_scope.cancel()

            group.start_soon(until_disconnect)
            async for event in self.content:
                held.append(event)
                if not event.get("data"):
                    continue  # a priming event: nothing for the client yet
                data = event["data"].encode()
                if _is_reply(data):
                    replied = True
                    listening.cancel()
                    await self._json(send, data)
                    return  # the writer ends by itself after the reply
                break
            listening.cancel()
            await EventSourceResponse(content=_chained(held, self.content), headers=self.headers)(
                scope, receive, send
            )
            group.cancel_scope.cancel()  # as sse-starlette ends its writer with the stream

    async def _json(self, send: Send, data: bytes) -> None:
        headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in self.headers.items()
            if name.lower() not in _SSE_ONLY_HEADERS
        ]
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})


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

        counted = [is_call]

        def settled() -> None:
            if counted[0]:
                counted[0] = False
                self.requests.calls -= 1

        self.requests.calls += is_call
        scope[SETTLED_SCOPE_KEY] = settled
        with anyio.CancelScope() as cancel:
            self.requests.scopes.add(cancel)
            try:
                await self.app(scope, receive, tracked_send)
            finally:
                self.requests.scopes.discard(cancel)
                settled()
        if cancel.cancelled_caught and not response["done"]:
            with contextlib.suppress(Exception):
                if not response["started"]:
                    await _plain(send, 503, "Service Unavailable: the server is shutting down")
                else:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})


_METHOD = re.compile(rb'"method"\s*:\s*"([^"\\]{1,100})"')
_NAME = re.compile(rb'"name"\s*:\s*"([^"\\]{1,100})"')


class AccessLog:
    """One INFO line per request: method, path, MCP method, tool, status, duration, session id
    and the caller (a JWT's subject, ``token-N`` for a static token).

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
