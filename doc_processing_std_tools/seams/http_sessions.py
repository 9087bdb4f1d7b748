"""The mcp SDK's streamable HTTP pieces: its session manager (with each session's events kept
apart in a shared event store, no reply to a cancelled request, and each POST's answer built by
a response class of the caller's), how many sessions it holds, its default HTTP client, and
what the HTTP fast path (``launcher/transports/http_fast_path.py``) needs of a session's
transport: the transport a request may use, the request's own stream of messages (what the
server sends tied to that request), and the session held open while a call is served.

Pinned by ``tests/seams/``.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from functools import partial
from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import anyio
import mcp.server.streamable_http as sdk_streamable_http
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from fastmcp.server.session_scoped_event_store import SessionScopedEventStore
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.streamable_http import (
    MCP_SESSION_ID_HEADER,
    REQUEST_STREAM_BUFFER_SIZE,
    EventMessage,
    StreamableHTTPServerTransport,
    check_accept_headers,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import INVALID_REQUEST
from pydantic import ValidationError
from sse_starlette import EventSourceResponse
from starlette.responses import Response

HELD_STREAMS = 16  # a session's cancelled requests whose SSE streams are left open

# (content, sender, headers) -> an ASGI response: how a POST is answered where the SDK would
# build sse-starlette's EventSourceResponse for it; set while a ScopedSessions serves a request
PostReply = Callable[[Any, Callable[[], Any], dict[str, str]], Any]
_SERVING: ContextVar[ScopedSessions | None] = ContextVar("dpt_serving", default=None)
# the body the SDK's transport just refused as not JSON-RPC, parsed (see
# :class:`_RefusalReading`), for :func:`_error_response` to answer
_REFUSED: ContextVar[Any] = ContextVar("dpt_refused", default=None)
# (the parsed body that is JSON but not JSON-RPC) -> the JSON body of the 400 answering it
InvalidRequest = Callable[[Any], bytes]
VALIDATION_PREFIX = "Validation error: "  # the SDK's answer to JSON that is not JSON-RPC


class ScopedSessions(StreamableHTTPSessionManager):
    """The SDK's session manager, each session's stream ids kept apart in a shared event store
    (as fastmcp's own manager does: the SDK reads ``self.event_store`` once per transport, so
    a property hands each its own ``SessionScopedEventStore``; without it, request id 1 of two
    sessions would share a stream)."""

    _shared_event_store: Any = None
    post_reply: PostReply | None = None
    # the answer to a body that is JSON but not JSON-RPC, where the SDK's is -32602 with
    # pydantic's whole report (a dozen errors, ~2 KB, with documentation URLs)
    invalid_request: InvalidRequest | None = None

    async def handle_request(self, scope: Any, receive: Any, send: Any) -> None:
        """The SDK's, with :attr:`post_reply` answering this request's POST (see
        :func:`_post_response`) and :attr:`invalid_request` its refusal (see
        :func:`_error_response`)."""
        if self.post_reply is None and self.invalid_request is None:
            await super().handle_request(scope, receive, send)
            return
        token = _SERVING.set(self)
        try:
            await super().handle_request(scope, receive, send)
        finally:
            _SERVING.reset(token)

    @property
    def event_store(self) -> Any:
        if self._shared_event_store is None:
            return None
        return SessionScopedEventStore(self._shared_event_store, session_id=uuid4().hex)

    @event_store.setter
    def event_store(self, value: Any) -> None:
        self._shared_event_store = value

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        """The SDK's new session, whose cancelled requests get no reply (see
        :class:`_Unanswered`)."""
        transport = super()._admit_session(requestor)
        if transport is not None:
            transport._terminate_unanswered_request = _Unanswered(transport)  # type: ignore[method-assign]
        return transport

    async def _serve_opening_request(
        self, http_transport: StreamableHTTPServerTransport, scope: Any, receive: Any, send: Any
    ) -> None:
        """The SDK's; a refused opening request (status 400 and up: the SDK discards its new
        session) is answered without the ``mcp-session-id`` of a session that is gone."""

        async def without_dead_session(message: Any) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                message["headers"] = [
                    (name, value)
                    for name, value in message.get("headers", ())
                    if name.lower() != _SESSION_HEADER
                ]
            await send(message)

        await super()._serve_opening_request(http_transport, scope, receive, without_dead_session)


_SESSION_HEADER = MCP_SESSION_ID_HEADER.encode("latin-1")
_sdk_error_response = StreamableHTTPServerTransport._create_error_response


def _error_response(
    self: StreamableHTTPServerTransport,
    error_message: str,
    status_code: Any,
    error_code: int = INVALID_REQUEST,
    headers: dict[str, str] | None = None,
) -> Any:
    """The SDK transport's error response; for a body that is JSON but not a JSON-RPC message,
    served by a :class:`ScopedSessions` with an ``invalid_request``, that one's body instead
    (under the SDK's status and headers)."""
    manager = _SERVING.get()
    if (
        manager is not None
        and manager.invalid_request is not None
        and error_message.startswith(VALIDATION_PREFIX)
    ):
        refused = _REFUSED.get()
        _REFUSED.set(None)
        response = _sdk_error_response(self, "", status_code, INVALID_REQUEST, headers)
        kept = {k: v for k, v in response.headers.items() if k != "content-length"}
        body = manager.invalid_request(refused)
        return Response(body, status_code=response.status_code, headers=kept)
    return _sdk_error_response(self, error_message, status_code, error_code, headers)


class _RefusalReading:
    """The SDK transport's JSON-RPC message adapter, remembering the body it refuses
    (``_REFUSED``, for :func:`_error_response`)."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter

    def validate_python(self, raw: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.adapter.validate_python(raw, *args, **kwargs)
        except ValidationError:
            _REFUSED.set(raw)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.adapter, name)


class _Unanswered:
    """Replaces the transport's ``_terminate_unanswered_request``, which answers a request that
    settled without a response (one the client cancelled) with -32800. MCP says the receiver of
    ``notifications/cancelled`` should not reply: its SSE stream is left open, as a server
    without the launcher leaves it (the client ends it, or the session's end does; an SDK
    client that saw the stream end would make up an error of its own). At most
    :data:`HELD_STREAMS` are kept per session, the SDK path's and the HTTP fast path's
    together (:func:`hold_unanswered`): past that the oldest ends, still unanswered. A stream
    is held as itself, not by its id: a client that reuses a cancelled id gets a stream of
    its own, and the held one still ends in its turn. A JSON response (not SSE) must carry a
    body: that one keeps the SDK's answer."""

    def __init__(self, transport: StreamableHTTPServerTransport) -> None:
        self.transport = transport
        self.held: deque[RequestStream] = deque()

    async def __call__(self, request_id: Any) -> None:
        transport = self.transport
        if transport.is_json_response_enabled:
            await StreamableHTTPServerTransport._terminate_unanswered_request(transport, request_id)
            return
        stream = transport._request_streams.get(str(request_id))
        if stream is not None:
            self.hold(str(request_id), stream)

    def hold(self, request_id: str, stream: RequestStream) -> None:
        """Leave request *request_id*'s *stream* open, ending the oldest held past the cap."""
        self.held = deque(held for held in self.held if _open(held))  # (the ended ones out)
        self.held.append(stream)
        streams = self.transport._request_streams
        while len(self.held) > HELD_STREAMS:
            oldest = self.held.popleft()
            for key, value in list(streams.items()):
                if value is oldest:
                    del streams[key]
            for end in oldest:
                end.close()


def _open(stream: RequestStream) -> bool:
    """Whether someone still reads *stream* (the SSE writer of its POST)."""
    return bool(stream[0].statistics().open_receive_streams > 0)


def _post_response(
    *, content: Any, data_sender_callable: Any = None, headers: Any = None, **options: Any
) -> Any:
    """What the SDK's transport builds where it names ``EventSourceResponse``: for the SSE stream
    of one POST (its sender is the transport's ``_run_sse_writer``) served by a
    :class:`ScopedSessions` with a ``post_reply``, that class's response; else sse-starlette's."""
    manager = _SERVING.get()
    make = manager.post_reply if manager is not None else None
    if (
        make is not None
        and isinstance(data_sender_callable, partial)
        and getattr(data_sender_callable.func, "__name__", None) == "_run_sse_writer"
    ):
        return make(content, data_sender_callable, dict(headers or {}))
    return EventSourceResponse(
        content=content, data_sender_callable=data_sender_callable, headers=headers, **options
    )


def session_manager(
    event_store: Any = None,
    post_reply: PostReply | None = None,
    invalid_request: InvalidRequest | None = None,
    **options: Any,
) -> ScopedSessions:
    """The mcp SDK's ``StreamableHTTPSessionManager`` with *options* and a shared *event_store*;
    with *post_reply*, each POST that the SDK would answer as an SSE stream is answered by
    ``post_reply(content, sender, headers)`` instead (the stream's events, the task that
    writes them, the response headers). The SDK reads the response class from its module, so
    the module's name is pointed at :func:`_post_response` (which keeps sse-starlette's for
    every other stream and every other manager). With *invalid_request*, a body that is JSON
    but not JSON-RPC is answered with ``invalid_request(body)`` (the transport's error response
    is :func:`_error_response`, the SDK's for every other manager; its message adapter,
    :class:`_RefusalReading`, keeps the refused body)."""
    sdk_streamable_http.EventSourceResponse = _post_response  # type: ignore[attr-defined,assignment]
    StreamableHTTPServerTransport._create_error_response = _error_response  # type: ignore[method-assign]
    adapter = sdk_streamable_http.jsonrpc_message_adapter  # type: ignore[attr-defined]
    if not isinstance(adapter, _RefusalReading):
        reading: Any = _RefusalReading(adapter)
        sdk_streamable_http.jsonrpc_message_adapter = reading  # type: ignore[attr-defined]
    manager = ScopedSessions(event_store=event_store, **options)
    manager.post_reply = post_reply
    manager.invalid_request = invalid_request
    return manager


def open_http_sessions(manager: Any) -> int:
    """How many MCP sessions a ``StreamableHTTPSessionManager`` holds open (``_server_instances``:
    one entry per session id, removed when the session ends or idles out)."""
    return len(manager._server_instances)


def mcp_http_client(headers: dict[str, str] | None, timeout: Any, auth: Any) -> Any:
    """The ``httpx2.AsyncClient`` the mcp SDK's HTTP transports make by default (its timeouts:
    30 s to connect, 300 s to read), from ``mcp.shared._httpx_utils``."""
    return create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)


# -- what the HTTP fast path needs of a session's transport ---------------------------------

# what the SDK's transport sends to a request's stream (an EventMessage), or the fast path's
# own reply (bytes) after them; its send side a memory stream's, or one that tells of each send
RequestStream = tuple[Any, MemoryObjectReceiveStream[Any]]


class _Told:
    """A request stream's send side that calls *on_send* before each item is sent, and when
    it is closed (what the SDK's transport and the holds of cancelled calls use of a memory
    stream's send side)."""

    def __init__(self, stream: MemoryObjectSendStream[Any], on_send: Callable[[], None]) -> None:
        self.stream, self.on_send = stream, on_send

    async def send(self, item: Any) -> None:
        self.on_send()
        await self.stream.send(item)

    def close(self) -> None:
        self.stream.close()
        self.on_send()

    async def aclose(self) -> None:
        self.close()

    def statistics(self) -> Any:
        return self.stream.statistics()


def session_transport(manager: Any, scope: Any, session_id: str) -> Any:
    """The transport of session *session_id* when the request in *scope* may use it as the
    SDK's own path would serve a POST there (the credential that opened it, alive, not idle
    past its time), and its POSTs are answered on an SSE stream without an event store or
    a security check of the SDK's own; else None (the SDK path answers)."""
    transport = manager._server_instances.get(session_id)
    if transport is None or manager.stateless or manager.json_response:
        return None
    user = scope.get("user")
    requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
    if requestor != manager._session_owners.get(session_id):
        return None
    idle = transport.idle_scope
    if (
        transport.is_terminated
        or transport._event_store is not None
        or transport._read_stream_writer is None
        or (idle is not None and idle.cancel_called)
        or transport._security.settings.enable_dns_rebinding_protection
    ):
        return None
    return transport


def sse_post(transport: Any, accept: str, content_type: str) -> bool:
    """Whether the transport would answer a POST with these ``Accept`` and ``Content-Type``
    headers on an SSE stream rather than refuse it (406, 415): its own checks, given only the
    two headers (a Starlette request would parse them all)."""
    request: Any = SimpleNamespace(headers={"accept": accept, "content-type": content_type})
    has_json, has_sse = check_accept_headers(request)
    return has_json and has_sse and bool(transport._check_content_type(request))


def body_limit(manager: Any) -> int:
    """The largest request body the session manager takes (a bigger one is answered 413)."""
    return int(manager.max_request_body_size)


def open_request_stream(
    transport: Any, request_id: str, on_send: Callable[[], None] | None = None
) -> RequestStream | None:
    """The stream of what the server sends tied to request *request_id* (its log messages,
    progress, requests to the client), opened where the SDK's transport routes them; None
    while the session has a request of that id in flight. With *on_send*, called before
    each message sent to it and when it is closed (so that no task need wait on it before
    then)."""
    streams = transport._request_streams
    if request_id in streams:
        return None
    send, receive = anyio.create_memory_object_stream[Any](REQUEST_STREAM_BUFFER_SIZE)
    stream: RequestStream = (send if on_send is None else _Told(send, on_send), receive)
    streams[request_id] = stream
    return stream


def close_request_stream(transport: Any, request_id: str, stream: RequestStream) -> None:
    """Close a stream :func:`open_request_stream` opened (as the transport's own clean-up
    does, without its awaits: a memory stream closes at once)."""
    if transport._request_streams.get(request_id) is stream:
        del transport._request_streams[request_id]
    for end in stream:
        end.close()


def hold_unanswered(transport: Any, request_id: str, stream: RequestStream) -> None:
    """Leave the stream of request *request_id*, which the client cancelled, open without a
    reply, among the session's held streams (see :class:`_Unanswered`: the oldest past the cap
    ends). A transport not made by :class:`ScopedSessions` holds none: its stream ends."""
    unanswered = transport._terminate_unanswered_request
    if isinstance(unanswered, _Unanswered):
        unanswered.hold(request_id, stream)
    else:
        for end in stream:
            end.close()


def event_data(transport: Any, message: Any) -> dict[str, Any] | None:
    """The SSE event of a message the SDK's transport routed to a request's stream; None for
    anything else."""
    if isinstance(message, EventMessage):
        return transport._create_event_data(message)  # type: ignore[no-any-return]
    return None


@contextlib.contextmanager
def serving(transport: Any) -> Iterator[None]:
    """The session is not idle while a request is served (as the transport's own
    ``handle_request`` counts it)."""
    idle = transport.idle_scope
    if idle is None or transport._idle_timeout is None:
        yield
        return
    transport._requests_in_flight += 1
    idle.deadline = math.inf
    try:
        yield
    finally:
        transport._requests_in_flight -= 1
        if not transport._requests_in_flight:
            idle.deadline = anyio.current_time() + transport._idle_timeout
