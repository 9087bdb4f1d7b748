"""The HTTP fast path of a relayed ``tools/call``: the POST's body to the child's pipe, no SDK.

Through the SDK a relayed call over streamable HTTP crossed the session manager and its
transport (the body validated into typed messages, three memory streams, a dispatcher task),
the SDK server's runner and middleware chain, and a client session to the child: most of
the launcher's CPU per call (docs/performance.md, "Where a relayed HTTP call's time goes").
:class:`HttpFastPath` sits at the MCP endpoint, inside the guards, auth, the access log,
the drain's count and the endpoint's profile, and serves a POST that is one plain
``tools/call`` (the stdio fast path's rules: :func:`.fast_path.relayed_call`) of a relayed
tool of a ``command:`` server, from a known handshake-era session whose own upstream session
(``sessions: per_client``) is up: the call goes to that session's child pipe with our own id
(:func:`.fast_path.forward_on_pipe`) under the exposed tool's ``CallPolicy`` with the
request's headers and the client's session, so access, rate limits, audit, pins, lock,
deadline and telemetry see the caller exactly as on the SDK path.

What the server sends the client during the call (log messages, requests such as sampling,
elicitation or roots) takes the SDK path's way: the client's own upstream session hands it
to that client's session tied to this request (``FrontLink.calling``), and the SDK's
transport routes it to this request's stream, opened here where it would have opened it;
the reply comes after them on the same stream. The call runs in the request's own task
and the answer is one JSON body when the reply comes first; else the SSE stream, written by
:class:`.asgi.PostReply` in a task started when the first message for the request comes
(the stream tells of it: ``open_request_stream``). A client that leaves (its connection's
protocol says so: ``asgi.LOST_SCOPE_KEY``), or
sends ``notifications/cancelled`` for the call with the credential that owns the session,
cancels it at the child; a cancelled call gets no reply, its stream held open among the
session's held streams, with the SDK path's (``seams/http_sessions.py``: the oldest past the
cap ends).

Anything else keeps the SDK path: another method, a call with a progress token or
task params, a tool it does not relay (or the profile does not show), a session not yet
known (its first calls, until its handshake ended and its own session opened), a 2026-era
request, a shared session (``sessions: shared``, per_user, an OAuth server), JSON-response
or stateless mode, an event store, a body without a length or over 64 KiB.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import ExitStack, suppress
from typing import TYPE_CHECKING, Any

import anyio
from starlette.datastructures import Headers

from ...seams.http_sessions import (
    body_limit,
    close_request_stream,
    event_data,
    hold_unanswered,
    open_request_stream,
    serving,
    session_transport,
    sse_post,
)
from ...seams.server_sessions import initialize_accepted
from ..external.fast_path import answered, cancelled_request, forward_on_pipe, relayed_call
from ..external.per_client import client_key, lasting
from ..external.relay_lines import HANDSHAKE_ERA
from .asgi import (
    SETTLED_SCOPE_KEY,
    ASGIApp,
    Message,
    PostReply,
    Receive,
    Scope,
    Send,
    send_json,
    tell_when_left,
)
from .session_binding import PROFILE_SCOPE_KEY

if TYPE_CHECKING:
    from ..external.client_requests import Fronts
    from ..external.relay_targets import RelayTarget

log = logging.getLogger("dpt-launch")

FAST_BODY_MAX = 64 * 1024  # bytes: a longer body keeps the SDK path (read once, by the SDK)
SESSION_HEADER = b"mcp-session-id"
LENGTH_HEADER = b"content-length"
ACCEPT_HEADER = b"accept"
TYPE_HEADER = b"content-type"
VERSION_HEADER = b"mcp-protocol-version"
CALL = b'"tools/call"'
MAX_WANTS = 64  # header pairs remembered
CANCELLED = b'"notifications/cancelled"'
SSE_HEADERS = {  # (the SDK transport's, for a POST's stream; with the session's id)
    "Cache-Control": "no-cache, no-transform",
    "Connection": "keep-alive",
    "Content-Type": "text/event-stream",
}

# the tools a connection to an endpoint may call here, by the name it calls them: given the
# endpoint's profile (None: the plain endpoint); asked per call
Tables = Callable[[str | None], Mapping[str, "RelayTarget"]]


class HttpFastPath:
    """The MCP endpoint, serving plain relayed calls itself (see the module)."""

    def __init__(self, app: ASGIApp, sessions: Any, fronts: Fronts, tables: Tables) -> None:
        self.app, self.sessions, self.fronts, self.tables = app, sessions, fronts, tables
        self._limit = min(FAST_BODY_MAX, body_limit(sessions))
        self._calls: dict[tuple[str, int | str], anyio.CancelScope] = {}
        # (Accept, Content-Type) -> whether the SDK's transport answers such a POST on an SSE
        # stream: the same few pairs from every client, checked once each
        self._wants: dict[tuple[bytes, bytes], bool] = {}

    def in_flight(self) -> bool:
        """Whether calls it took are still running (or held, cancelled): a cancel for one
        must reach it."""
        return bool(self._calls)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not self.fronts.http:
            await self.app(scope, receive, send)
            return
        session_id = length = None
        accept = content_type = b""
        for name, value in scope["headers"]:
            if name == SESSION_HEADER:
                session_id = value.decode("latin-1")
            elif name == LENGTH_HEADER:
                length = value
            elif name == ACCEPT_HEADER:
                accept = value
            elif name == TYPE_HEADER:
                content_type = value
            elif name == VERSION_HEADER and value.decode("latin-1") not in HANDSHAKE_ERA:
                await self.app(scope, receive, send)  # a 2026-era request
                return
        client = self.fronts.http.get(session_id) if session_id is not None else None
        if client is None or length is None or not length.isdigit() or int(length) > self._limit:
            await self.app(scope, receive, send)
            return
        session = client.session
        assert session_id is not None
        body, messages = await _read_body(receive)
        replay = _replaying(messages, receive)
        if body is None:  # (the client left while sending)
            await self.app(scope, replay, send)
            return
        if body.find(CALL) >= 0:
            taken = self._take(scope, session, session_id, body, (accept, content_type))
            if taken is not None:
                await self._serve(scope, receive, replay, send, session, session_id, *taken)
                return
        elif self._calls and body.find(CANCELLED) >= 0:
            request_id = cancelled_request(body)
            cancel = self._calls.get((session_id, request_id)) if request_id is not None else None
            # (only by the session's owner, as _take serves its calls; the SDK path still
            # answers the notification: 202, or its refusal)
            if cancel is not None and session_transport(self.sessions, scope, session_id):
                cancel.cancel()
        await self.app(scope, replay, send)

    def _take(
        self, scope: Scope, session: Any, session_id: str, body: bytes, wants: tuple[bytes, bytes]
    ) -> tuple[Any, RelayTarget, int | str, dict[str, Any]] | None:
        """(the session's transport, the target, the request id, the params) when this POST
        is served here. *wants*: its Accept and Content-Type headers."""
        try:
            found = relayed_call(body, self.tables(scope.get(PROFILE_SCOPE_KEY)))
            if found is None:
                return None
            target, request_id, params = found
            supervisor = target.supervisor
            if (
                supervisor is None
                or "progressToken" in (params.get("_meta") or {})
                or (session_id, request_id) in self._calls
                or not lasting(session)
                or not initialize_accepted(session)
                or supervisor.state != "up"
                or supervisor.entry.session_mode != "per_client"
                or supervisor.subject() is not None
            ):
                return None
            own = supervisor.pool.get(client_key(session))
            if (
                own is None
                or own.client is None
                or own.link is None
                or getattr(own.transport, "pipe", None) is None
            ):
                return None  # (not open yet: the SDK path opens it)
            transport = session_transport(self.sessions, scope, session_id)
            if transport is None:
                return None
            sse = self._wants.get(wants)
            if sse is None:
                sse = sse_post(transport, wants[0].decode("latin-1"), wants[1].decode("latin-1"))
                if len(self._wants) < MAX_WANTS:
                    self._wants[wants] = sse
            if not sse:
                return None
        except Exception:  # whatever is odd about the request, the SDK path answers it
            log.debug("HTTP fast path: left a request to the SDK", exc_info=True)
            return None
        return transport, target, request_id, params

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        replay: Receive,
        send: Send,
        session: Any,
        session_id: str,
        transport: Any,
        target: RelayTarget,
        request_id: int | str,
        params: dict[str, Any],
    ) -> None:
        streaming = False  # whether the answer is the request's stream (not the reply alone)

        def stream_it() -> None:
            """The answer as the stream, written by a task of its own from now on: something
            the server sent for the request came before the reply (its log messages, its
            requests to the client), the stream ended (the session's end: the call is then
            cancelled, as on the SDK path), or the call was cancelled (its stream held)."""
            nonlocal streaming
            if not streaming:
                streaming = True
                group.start_soon(write)

        async def write() -> None:
            sse = {**SSE_HEADERS, "mcp-session-id": session_id}
            await PostReply(_Events(transport, from_request), None, sse).answer(
                scope, receive, send
            )
            group.cancel_scope.cancel()  # (the stream ended first: the session's end)

        stream = open_request_stream(transport, str(request_id), stream_it)
        if stream is None:  # (the SDK has a request of that id in flight: it answers)
            await self.app(scope, replay, send)
            return
        key = (session_id, request_id)
        cancel = self._calls[key] = anyio.CancelScope()
        to_request, from_request = stream
        busy = ExitStack()  # (the session is busy, the drain waits, until the call settles)
        stop: Callable[[], None] = _nothing  # (the watch for a client that leaves)
        try:
            with busy:
                busy.enter_context(serving(transport))
                # The call runs here, in the request's task; the answer's stream, only when
                # there is one, in a task of its own (stream_it).
                async with anyio.create_task_group() as group:
                    stop = tell_when_left(scope, receive, group, group.cancel_scope.cancel)
                    with cancel:
                        reply = await answered(
                            target,
                            request_id,
                            params,
                            lambda: self._forward(target, session, request_id, params),
                            headers=Headers(scope=scope),
                            session=session,
                        )
                    if cancel.cancelled_caught:  # no reply; held as the SDK path holds its own
                        hold_unanswered(transport, str(request_id), stream)
                        busy.close()  # (a held stream is no call: the session may idle out)
                        scope.get(SETTLED_SCOPE_KEY, _nothing)()  # (nor for the drain)
                        # What the server still sends, until the stream ends; the watch stays,
                        # so a client that leaves ends the held wait (and frees its request,
                        # which uvicorn's limit_concurrency counts) instead of the cap's eviction.
                        stream_it()
                        return
                    stop()
                    if streaming:  # the reply ends the stream, after what came before it
                        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                            await to_request.send(reply.rstrip(b"\n"))  # (closed: session ended)
                    else:
                        streaming = True  # (what the server sends for it now goes nowhere)
                        await send_json(send, reply.rstrip(b"\n"), {"mcp-session-id": session_id})
        finally:
            stop()
            streaming = True  # (the task group is gone: closing the stream starts nothing)
            self._calls.pop(key, None)
            close_request_stream(transport, str(request_id), stream)

    async def _forward(
        self, target: RelayTarget, session: Any, request_id: int | str, params: dict[str, Any]
    ) -> bytes:
        """On the client's own upstream session (the SDK path's rule: ``own_session``), tied
        to this call, so what the server asks meanwhile is this client's, for this request."""
        supervisor = target.supervisor
        assert supervisor is not None  # (_take takes relayed tools only)
        own = await supervisor.own_session(session)
        pipe = getattr(own.transport, "pipe", None) if own is not None else None
        if own is None or own.link is None or pipe is None:
            raise supervisor.not_connected()
        with own.link.calling(session, request_id):
            passed = pipe.passed
            reply = await forward_on_pipe(pipe, target, request_id, params)
            if pipe.passed != passed and own.client is not None:
                # The child sent something else meanwhile (a log message...): it goes the SDK
                # session's way, to this request's stream; a ping behind it on that way lets it
                # reach the stream before the reply, which came straight here.
                await own.client.ping()
            return reply


class _Events:
    """A request's stream as SSE events, up to the reply (or the stream's end: the session's,
    or a cancelled call's held stream let go). (An iterator, not an async generator: one left
    at its reply would be closed later in a task of its own.)"""

    def __init__(self, transport: Any, stream: Any) -> None:
        self.transport, self.stream, self.done = transport, stream, False

    def __aiter__(self) -> _Events:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self.done:
            try:
                item = await self.stream.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                break
            if isinstance(item, bytes):  # the reply
                self.done = True
                return {"event": "message", "data": item.decode()}
            event = event_data(self.transport, item)
            if event is not None:
                return event
        raise StopAsyncIteration


def _nothing() -> None:
    """(a request no drain counts)"""


async def _read_body(receive: Receive) -> tuple[bytes | None, list[Message]]:
    """The request's body (None when the client left first) and the messages it came in."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return None, messages
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks), messages


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """*receive*, giving *messages* (already read) first."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
