"""The launcher's stdio transport: one JSON-RPC message per line on stdin and stdout.

Why not the SDK's ``mcp.server.stdio.stdio_server``:

* **every request gets an answer.** The SDK drops a line it cannot validate (bad
  JSON, a lone-surrogate escape such as ``"\\ud800"``, a message without
  ``method``) without replying, so the client waits forever. Here such a line gets
  a JSON-RPC error: ``-32700`` (parse error) or ``-32600`` (invalid request), with
  ``id: null`` when the JSON cannot be read to its end, else the request's ``id``;
* **a signal stops serving at once.** The SDK reads stdin in an AnyIO worker
  thread that cannot be interrupted; here a daemon thread reads the raw
  descriptor, so cancelling serving never waits for the client to write;
* **reading is linear in the line's length** (a line is assembled from its
  chunks once), and replies are written by one daemon thread in order, so the
  event loop never blocks on a full pipe and a reply that cannot be encoded
  (text that is not valid Unicode) becomes an error for its request instead of
  ending the session.

While serving, fd 0 reads the null device and fd 1 goes to stderr (as with the
SDK), so a tool or child process that reads stdin or prints cannot touch the wire.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp.shared.message import SessionMessage
from mcp_types import (
    PROTOCOL_VERSION_META_KEY,
    JSONRPCNotification,
    JSONRPCRequest,
    jsonrpc_message_adapter,
)

from ..external import client_hello
from ..lines import LineBuffer, read_lines
from .identity import note_stdio_client
from .line_writer import LineWriter
from .wire_errors import (
    BOOLEAN_TOKEN_TEXT,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    INVALID_REQUEST_TEXT,
    boolean_progress_token,
    encode_error,
    error_reply,
)

if sys.platform != "win32":  # (POSIX: the descriptors are moved aside with it)
    import fcntl

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from ..external.fast_path import FastPath

log = logging.getLogger("dpt-launch")

FLUSH_TIMEOUT = 2.0  # seconds to let queued replies reach the client at exit
CANCELLED = "notifications/cancelled"
INITIALIZED = "notifications/initialized"
# what the launcher serves whatever it mounts; the SDK refuses these before initialize as
# "Invalid request parameters", which does not say what is wrong
GATED = frozenset(
    {
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)
NOT_INITIALIZED_TEXT = (
    "Invalid request parameters: the connection is not initialized; send initialize first"
)


class _Handshake:
    """Whether the client has begun the handshake (``initialize``, or a bare
    ``notifications/initialized``), as the SDK's gate judges it."""

    def __init__(self) -> None:
        self.begun = False


class _Wire:
    """fd 0 and fd 1 moved aside: the protocol uses private duplicates of them."""

    def __init__(self) -> None:
        self.stdin = self.stdout = -1
        self._saved: list[tuple[int, int]] = []

    def claim(self) -> None:
        for fd, diversion in ((0, "null"), (1, "stderr")):
            try:
                private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            except OSError:  # no such descriptor: serve it as it is
                private = fd
            else:
                try:
                    if diversion == "null":
                        null = os.open(os.devnull, os.O_RDONLY)
                        os.dup2(null, fd)
                        os.close(null)
                    else:
                        os.dup2(2, fd)
                    self._saved.append((fd, private))
                except OSError:
                    os.dup2(private, fd)
                    os.close(private)
                    private = fd
            if fd == 0:
                self.stdin = private
            else:
                self.stdout = private

    def restore(self) -> None:
        """Point fd 0 and 1 back at the wire. The stdin duplicate stays open: the
        reader thread may still be blocked on it, and a recycled number would feed it
        another file."""
        for fd, private in self._saved:
            with suppress(OSError):
                os.dup2(private, fd)
            if fd == 1:
                with suppress(OSError):
                    os.close(private)
        self._saved.clear()


@asynccontextmanager
async def stdio_streams(
    on_eof: Callable[[], None] | None = None,
    fast: FastPath | None = None,
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]
]:
    """(read, write) streams for ``Server.run``, carried over this process's stdin/stdout.

    The read stream ends at stdin's EOF (after calling *on_eof*, from the reader thread). Leaving the context writes what is queued
    (for up to :data:`FLUSH_TIMEOUT` seconds) and gives fd 0 and 1 back. Lines that *fast*
    takes (relayed calls to external stdio servers) are served by it and never reach the SDK.
    What was read of stdin before serving (:mod:`..external.client_hello`) is served first.
    """
    first = client_hello.take()
    wire = _Wire()
    wire.claim()
    writer = LineWriter(wire.stdout)
    handshake = _Handshake()
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    token = anyio.lowlevel.current_token()
    try:
        async with anyio.create_task_group() as group:
            if fast is not None:
                fast.bind(group, writer.put, writer.expect, writer.answered)
            if client_hello.pollable(wire.stdin):
                group.start_soon(
                    _pump_on_loop, wire.stdin, read_send, writer, handshake, on_eof, fast, first
                )
            else:
                threading.Thread(
                    target=_pump,
                    args=(wire.stdin, read_send, writer, handshake, token, on_eof, fast, first),
                    name="dpt-launch stdin",
                    daemon=True,
                ).start()
            group.start_soon(_write_replies, write_receive, writer, fast)
            try:
                yield read_receive, write_send
            finally:
                group.cancel_scope.cancel()
    finally:
        # a reply still queued (the answer to the client's last request) must get out
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(writer.close, FLUSH_TIMEOUT)
        wire.restore()


def _route(line: bytes, writer: LineWriter, handshake: _Handshake, fast: FastPath | None) -> Any:
    """The SessionMessage for the SDK in *line* (one the fast path did not take), or None
    when it was answered here."""
    if not line.strip(b" \t\r\n"):
        return None  # a blank line is not a message (JSON's whitespace only: RFC 8259)
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception as exc:
        reply = error_reply(line, exc)
        if reply is not None:
            writer.put(reply)
        log.warning("stdio: %s", _log_text(reply, exc))
        return None
    if isinstance(message, JSONRPCNotification) and _has_id(line):
        # an id that is neither a string nor an integer (true, 1.5, {}): pydantic
        # reads the line as a notification, but the sender waits for an answer
        writer.put(encode_error(None, INVALID_REQUEST, INVALID_REQUEST_TEXT))
        log.warning("stdio: answered a request whose id is not a string or integer")
        return None
    if isinstance(message, JSONRPCRequest):
        if boolean_progress_token(message.params):
            writer.put(encode_error(message.id, INVALID_PARAMS, BOOLEAN_TOKEN_TEXT))
            log.warning("stdio: answered a request whose progressToken is a boolean")
            return None
        if not handshake.begun and message.method in GATED and not _stateless(message.params):
            writer.put(encode_error(message.id, INVALID_PARAMS, NOT_INITIALIZED_TEXT))
            log.warning("stdio: answered a %s sent before initialize", message.method)
            return None
        writer.expect(message.id)
        if message.method == "initialize":
            handshake.begun = True
            note_stdio_client(message.params)
            if fast is not None:
                fast.initialize_id = message.id
    elif isinstance(message, JSONRPCNotification) and message.method == INITIALIZED:
        handshake.begun = True
    elif isinstance(message, JSONRPCNotification) and message.method == CANCELLED:
        cancelled = (message.params or {}).get("requestId")
        if isinstance(cancelled, str | int):  # (a list or an object names no request)
            writer.answered(cancelled)
    return SessionMessage(message)


def _stateless(params: Any) -> bool:
    """Whether a request carries the 2026-era envelope (its protocol version in ``_meta``): it
    needs no handshake, and the SDK serves it in that era."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


async def _pump_on_loop(
    fd: int,
    send: MemoryObjectSendStream[SessionMessage | Exception],
    writer: LineWriter,
    handshake: _Handshake,
    on_eof: Callable[[], None] | None,
    fast: FastPath | None,
    first: bytes = b"",
) -> None:
    """Read stdin on the event loop, from a reader callback that stays registered: no thread
    hop and no task wake-up per message. Lines the fast path takes are served from the
    callback; the others go to the SDK from this task, and reading pauses while any wait.
    See :func:`_pump`."""
    loop = asyncio.get_running_loop()
    buffer = LineBuffer()
    waiting: deque[SessionMessage] = deque()
    wake = asyncio.Event()
    registered = ended = False

    def reading(on: bool) -> None:
        nonlocal registered
        if on and not registered:
            loop.add_reader(fd, readable)
        elif not on and registered:
            loop.remove_reader(fd)
        registered = on

    def readable(given: list[bytes] | None = None) -> None:
        nonlocal ended
        if given is not None:
            lines: list[bytes] | None = given
        else:
            try:
                lines = buffer.read(fd)  # readable: returns at once
            except BlockingIOError:
                return
            except OSError:  # stdin broke: as good as its end
                lines = None
        if ended := lines is None:
            lines = [rest] if (rest := buffer.rest()) else []
        for line in lines:
            if fast is not None and fast.take(line, on_loop=True):
                continue  # a relayed call (or its cancellation): served without the SDK
            if (message := _route(line, writer, handshake, fast)) is not None:
                waiting.append(message)
        if waiting or ended:
            reading(False)
            wake.set()

    try:
        async with send:
            if first:  # (read before serving: the client's initialize, maybe more)
                readable(buffer.feed(first))
            if not waiting:
                reading(True)
            while True:
                await wake.wait()
                wake.clear()
                while waiting:
                    await send.send(waiting.popleft())
                if ended:
                    break
                reading(True)
            if on_eof is not None:
                on_eof()
            # the client's last requests still get their replies
            await anyio.to_thread.run_sync(writer.wait_for_answers, abandon_on_cancel=True)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return  # the server stopped reading
    finally:
        reading(False)


def _pump(
    fd: int,
    send: MemoryObjectSendStream[SessionMessage | Exception],
    writer: LineWriter,
    handshake: _Handshake,
    token: object,
    on_eof: Callable[[], None] | None,
    fast: FastPath | None = None,
    first: bytes = b"",
) -> None:
    """Reader thread (stdin the loop cannot wait for): validate each line; hand messages to
    the loop, answer the rest."""
    try:
        for line in read_lines(fd, first):
            if fast is not None and fast.take(line):
                continue  # a relayed call (or its cancellation): served without the SDK
            if (message := _route(line, writer, handshake, fast)) is not None:
                anyio.from_thread.run(send.send, message, token=token)  # type: ignore[arg-type]
        if on_eof is not None:
            on_eof()
        writer.wait_for_answers()  # the client's last requests still get their replies
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError, OSError):
        return  # the server stopped reading, the event loop is gone, or stdin broke
    finally:
        with suppress(RuntimeError):
            anyio.from_thread.run_sync(send.close, token=token)  # type: ignore[arg-type]


def _has_id(line: bytes) -> bool:
    """Whether the JSON object on *line* has an ``id`` member (only read when it may)."""
    if b'"id"' not in line:
        return False
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(message, dict) and "id" in message


def _log_text(reply: bytes | None, problem: Exception) -> str:
    if reply is None:
        return "ignored a malformed response from the client"
    return "answered a malformed message: " + reply.decode("utf-8", "replace").strip()[:500]


async def _write_replies(
    receive: MemoryObjectReceiveStream[SessionMessage],
    writer: LineWriter,
    fast: FastPath | None = None,
) -> None:
    async with receive:
        async for session_message in receive:
            message = session_message.message
            is_reply = not hasattr(message, "method")  # a response or an error
            if (
                fast is not None
                and is_reply
                and fast.initialize_id is not None
                and getattr(message, "id", None) == fast.initialize_id
            ):
                fast.negotiated(getattr(message, "result", None))  # before the client sees it
            if line := _encode(message):
                writer.put(line)
            if is_reply:
                writer.answered(getattr(message, "id", None))


def _encode(message: Any) -> bytes:
    """One message as a line; a reply that cannot be encoded becomes an error for its id."""
    try:
        text: str = message.model_dump_json(by_alias=True, exclude_unset=True)
        return text.encode("utf-8") + b"\n"
    except Exception as exc:
        request_id = getattr(message, "id", None)
        log.error("stdio: could not encode a reply to request %r: %s", request_id, exc)
        if request_id is None or not hasattr(message, "result"):
            return b""
        return encode_error(
            request_id,
            INTERNAL_ERROR,
            "Internal error: the result holds text that is not valid Unicode (e.g. a file "
            "name that is not UTF-8) and cannot be sent as JSON",
        )
