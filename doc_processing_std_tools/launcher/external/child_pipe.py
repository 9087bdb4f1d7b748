"""An external command's stdin and stdout, shared by the SDK session and raw relayed calls.

:class:`ChildPipe` picks replies to our own requests (ids ``"dpt~N"``) and progress for
them off the child's stdout before any validation; every other line goes to the SDK
``ClientSession`` unchanged, which keeps serving listing, prompts, resources, pings and
the child's own messages. :func:`.child_process.child_transport` makes it a fastmcp
transport; the fast path that uses it is :mod:`.fast_path`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCNotification, jsonrpc_message_adapter
from mcp_types.methods import SERVER_NOTIFICATIONS

from ...exceptions import DptError
from ...seams.stdio_children import asyncio_pipes
from ..lines import LineBuffer

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream


log = logging.getLogger("dpt-launch")

READ_CHUNK = 1 << 16  # bytes per read of the child's stdout
CANCEL_SEND_TIMEOUT = 1.0  # seconds to tell the child a call was cancelled
ID_PREFIX = "dpt~"  # our request ids; the SDK session's are integers, so they never clash
SDK_REPLY_HEAD = b'{"jsonrpc":"2.0","id":"' + ID_PREFIX.encode()  # how SDK servers write replies
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # may be a lone surrogate: check it
CONNECTION_META_PREFIX = "io.modelcontextprotocol/"  # 2026-era keys that describe one connection
CONNECTION_META_MARK = CONNECTION_META_PREFIX.encode()
PROGRESS = b'"notifications/progress"'
NOTIFICATION = b'"notifications/'
OUR_ID = b'"' + ID_PREFIX.encode()
# after our id, what makes the line a reply (a child's own request may use any id, ours too)
REPLY_TAILS = (b'","result":', b'","error":')
# how Node's SDK servers write a result (keys in their order of creation): the id last
RESULT_HEAD = b'{"result":{'
RESULT_ID_HEAD = b'},"jsonrpc":"2.0","id":"'
RESULT_ID = RESULT_ID_HEAD + ID_PREFIX.encode()
# the id of a reply, when its line begins as replies do (then an overlong one can be answered)
REPLY_ID = re.compile(
    rb'^[ \t\r]*\{[ \t\r]*(?:"jsonrpc"[ \t\r]*:[ \t\r]*"2\.0"[ \t\r]*,[ \t\r]*)?'
    rb'"id"[ \t\r]*:[ \t\r]*("[^"\\]{1,100}"|-?[0-9]{1,18})[ \t\r]*,'
)
SPEC_NOTIFICATIONS = frozenset(method for method, _version in SERVER_NOTIFICATIONS)
JSON_SPACE = " \t\n\r"  # the only whitespace JSON knows (RFC 8259): not str.isspace's
# the data of an error reply the launcher wrote itself (an overlong line): never the server's
LAUNCHER_ERROR_DATA = {"from": "dpt-launch"}


class ConnectionLost(DptError, anyio.BrokenResourceError):
    """The child's stdout ended while a call waited for its reply."""


@dataclass(eq=False, slots=True)
class PendingCall:
    """One raw request to the child, waiting for its reply line: to a task awaiting
    :meth:`reply`, or to an *on_settle* callback (then no future is made)."""

    key: str  # our id, e.g. "dpt~12"
    line: bytes = b""
    parsed: Any = None  # the reply as JSON when it had to be parsed to be recognised
    lost: bool = False
    settled: bool = False
    on_settle: Callable[[PendingCall], None] | None = None  # instead of awaiting the reply
    _waiter: asyncio.Future[None] | None = None

    def settle(self, line: bytes = b"", parsed: Any = None, *, lost: bool = False) -> None:
        if self.settled:
            return
        self.settled = True
        self.line, self.parsed, self.lost = line, parsed, lost
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        if self.on_settle is not None:
            self.on_settle(self)

    async def reply(self) -> tuple[bytes, Any]:
        if not self.settled:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        if self.lost:
            raise ConnectionLost("the connection closed")
        return self.line, self.parsed


class ChildPipe:
    """An external command's stdin/stdout, shared by the SDK session and raw relayed calls."""

    def __init__(self, process: Any, max_line: int | None = None, name: str = "") -> None:
        self.process = process
        self.max_line = max_line
        self.name = name
        self.pending: dict[str, PendingCall] = {}
        self.progress: dict[str, Callable[[dict[str, Any]], None]] = {}  # our token -> handler
        self.closed = False
        # a notification the SDK has no type for (it would drop it): handed on, in order
        self.on_notification: Callable[[str, Any], Awaitable[None]] | None = None
        # while calls of the fast path wait here: where such a notification is written at
        # once, ahead of their replies (set by the fast path: the stdio client's line writer)
        self.write_note: Callable[[bytes], None] | None = None
        # lines handed on to the SDK session as they came (what the child sent beside replies)
        self.passed = 0
        self._count = 0
        # Straight to asyncio's pipes where it can: our replies are picked off the child's
        # stdout as they arrive, and lines are written without anyio's extra loop pass.
        self._writer, stdout = asyncio_pipes(process)
        # (the writer's transport, reached per call without the StreamWriter's Python methods)
        self._stdin = self._writer.transport if self._writer is not None else None
        self._routed = stdout is not None  # then read() only sees lines that are not ours
        if stdout is not None:
            stdout.set_protocol(_RoutingProtocol(self, stdout.get_protocol()))

    def overlong(self, head: bytes, size: int, into: list[bytes]) -> None:
        """A stdout line over :attr:`max_line` was dropped: say so in one line, and when its head
        shows the id of a reply, put an error reply for that id in *into* (routed as the
        child's own line would be: to our call, or to the SDK session's)."""
        shown = head[:200].decode("utf-8", "replace")
        log.warning(
            "servers.%s: dropped a stdout line of %d bytes, over max_line_bytes (%d): %r...",
            self.name,
            size,
            self.max_line,
            shown,
        )
        found = REPLY_ID.match(head)
        if found is None:
            return
        error = {
            "code": -32603,
            "message": f"the server's reply was over {self.max_line} bytes "
            f"(servers.{self.name}.max_line_bytes) and was dropped",
            "data": LAUNCHER_ERROR_DATA,
        }
        line = (
            b'{"jsonrpc":"2.0","id":' + found.group(1) + b',"error":' + json.dumps(error).encode()
        )
        into.append(line + b"}")

    def next_key(self) -> str:
        """A new id for a request of ours."""
        self._count += 1
        return f"{ID_PREFIX}{self._count}"

    def open_call(self, key: str | None = None) -> PendingCall:
        """Wait for the reply to our request *key* (a new one by default: :meth:`next_key`)."""
        call = PendingCall(key or self.next_key())
        if self.closed:
            call.settle(lost=True)
        self.pending[call.key] = call
        return call

    def forget(self, call: PendingCall) -> None:
        self.pending.pop(call.key, None)
        self.progress.pop(call.key, None)

    def can_send_now(self) -> bool:
        """Whether :meth:`send_now` can write a line at once (nothing waits to be written)."""
        stdin = self._stdin
        return (
            stdin is not None
            and not self.closed
            and not stdin.is_closing()
            and not stdin.get_write_buffer_size()
        )

    def send_now(self, data: bytes) -> bool:
        """Write whole lines without waiting (see :meth:`can_send_now`); False when closed."""
        if self._stdin is None or self._stdin.is_closing():
            return False
        try:
            self._stdin.write(data)
        except (OSError, RuntimeError):
            return False
        return True

    async def send(self, data: bytes) -> None:
        """Write whole lines to the child (each ``send`` is appended whole, never interleaved)."""
        try:
            if self._writer is None:
                await self.process.stdin.send(data)
                return
            if self._writer.is_closing():
                raise ConnectionLost("the connection closed")
            self._writer.write(data)
            await self._writer.drain()  # returns at once unless the pipe is full
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError, RuntimeError) as exc:
            raise ConnectionLost("the connection closed") from exc

    async def read(self, deliver: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        """Route each line of the child's stdout until it ends; then fail what still waits."""
        answers: list[bytes] = []  # error replies for overlong lines (not when routed: above)
        buffer = LineBuffer(
            None if self._routed else self.max_line,
            lambda head, size: self.overlong(head, size, answers),
        )
        try:
            async with deliver:
                while True:
                    try:
                        chunk = await self.process.stdout.receive(READ_CHUNK)
                    except (anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                        break
                    except anyio.BrokenResourceError:
                        break
                    lines = buffer.feed(chunk)
                    if answers:
                        lines += answers
                        answers.clear()
                    for line in lines:
                        if self._routed or not self._take(line):
                            self.passed += not self._routed  # (routed: counted as they came)
                            message = _parse_line(line)
                            if self.on_notification is not None and (
                                custom := custom_notification(message)
                            ):
                                await self.on_notification(*custom)
                                continue
                            await deliver.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is gone
        finally:
            self.closed = True
            for call in list(self.pending.values()):
                call.settle(lost=True)

    def _take(self, line: bytes) -> bool:
        """Whether *line* was a reply to one of our calls, or progress for one (then it is used).

        A reply to a call no longer waited for (cancelled, timed out) is dropped here too.
        """
        try:
            if line.startswith(SDK_REPLY_HEAD) and (  # (the usual reply: no other call on the way)
                line.startswith(REPLY_TAILS, end := line.find(b'"', len(SDK_REPLY_HEAD)))
            ):
                key = line[len(SDK_REPLY_HEAD) - len(ID_PREFIX) : end].decode("utf-8", "replace")
                call = self.pending.pop(key, None)
                if call is not None:
                    call.settle(line)
                return True
            if line.startswith(RESULT_HEAD) and line.endswith(b'"}'):
                start = line.rfind(RESULT_ID) + len(RESULT_ID) - len(ID_PREFIX)
                key = line[start:-2].decode("utf-8", "replace")
                if start > len(RESULT_ID) and '"' not in key and "\\" not in key:
                    call = self.pending.pop(key, None)
                    if call is not None:
                        call.settle(line)
                    return True
            return self._route(line)
        except Exception:  # whatever is odd about the line, the SDK session gets it
            log.debug("fast path: left a line of the child's to the SDK", exc_info=True)
            return False

    def _route(self, line: bytes) -> bool:
        """A line that is not written as SDK servers write replies: parsed when it may be ours."""
        if line.find(OUR_ID) < 0 and not (self.progress and line.find(PROGRESS) >= 0):
            if self.write_note is None or not self.pending or line.find(NOTIFICATION) < 0:
                return False
            return self._write_note(line)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            return False
        if not isinstance(message, dict):
            return False
        reply_id = message.get("id")
        if "method" not in message and isinstance(reply_id, str) and reply_id.startswith(ID_PREFIX):
            call = self.pending.pop(reply_id, None)
            if call is not None:
                call.settle(line, message)
            return True
        params = message.get("params")
        if message.get("method") == "notifications/progress" and isinstance(params, dict):
            token = params.get("progressToken")
            handler = self.progress.get(token) if isinstance(token, str) else None
            if handler is not None:
                handler(params)
                return True
        return False

    def _write_note(self, line: bytes) -> bool:
        """A notification no MCP version defines, while fast-path calls wait: written to the
        client now, so it comes before their replies, as the server sent it."""
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            return False
        method = message.get("method") if isinstance(message, dict) else None
        if not isinstance(method, str) or "id" in message or method in SPEC_NOTIFICATIONS:
            return False
        assert self.write_note is not None
        note = {"jsonrpc": "2.0", "method": method}
        if "params" in message:
            note["params"] = message["params"]
        try:
            self.write_note(json.dumps(note, separators=(",", ":")).encode() + b"\n")
        except ValueError:  # (not encodable: the session's way drops it too)
            return False
        return True

    async def write_session_messages(
        self, receive: MemoryObjectReceiveStream[SessionMessage]
    ) -> None:
        """The SDK session's messages to the child, encoded as the SDK's stdio client does."""
        async with receive:
            async for session_message in receive:
                text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    await self.send((text + "\n").encode("utf-8"))
                except ConnectionLost:
                    return


class _RoutingProtocol(asyncio.Protocol):
    """Between the child's stdout pipe and asyncio's subprocess protocol: replies to our calls
    are taken as the bytes arrive (no pass through the stream reader and the read task);
    every other line goes on below, unchanged, to :meth:`ChildPipe.read`."""

    def __init__(self, pipe: ChildPipe, below: asyncio.Protocol) -> None:
        self._pipe, self._below = pipe, below
        self._answers: list[bytes] = []  # error replies for overlong lines
        self._buffer = LineBuffer(
            pipe.max_line, lambda head, size: pipe.overlong(head, size, self._answers)
        )
        self._max = pipe.max_line if pipe.max_line is not None else sys.maxsize

    def data_received(self, data: bytes) -> None:
        buffer, passed = self._buffer, []
        whole = (
            not buffer.unfinished
            and not buffer.dropping
            and data.find(b"\n") == len(data) - 1
            and len(data) <= self._max
        )  # (usual: no feed)
        lines = [data[:-1]] if whole else buffer.feed(data)
        if self._answers:
            lines += self._answers
            self._answers.clear()
        for line in lines:  # (no comprehension's frame)
            if not self._pipe._take(line):
                passed.append(line)
        if passed:
            self._pipe.passed += len(passed)
            self._below.data_received(b"\n".join(passed) + b"\n")

    def eof_received(self) -> bool | None:
        rest = self._buffer.rest()
        for answer in self._answers:
            if not self._pipe._take(answer):
                self._below.data_received(answer + b"\n")
        self._answers.clear()
        if rest is not None and not self._pipe._take(rest):
            self._below.data_received(rest)
        return self._below.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._below.connection_lost(exc)

    def pause_writing(self) -> None:
        self._below.pause_writing()

    def resume_writing(self) -> None:
        self._below.resume_writing()


def _parse_line(line: bytes) -> Any:
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        shown = line[:200].decode("utf-8", "replace").rstrip()
        log.warning("an external server wrote a line that is not JSON-RPC (ignored): %r", shown)
        return exc


def custom_notification(message: Any) -> tuple[str, Any] | None:
    """(method, params) of a notification no MCP version defines (the SDK's session drops
    those), else None."""
    inner = getattr(message, "message", None)
    if not isinstance(inner, JSONRPCNotification) or inner.method in SPEC_NOTIFICATIONS:
        return None
    return inner.method, inner.params


def cancelled_note(key: str) -> bytes:
    """The line telling the child that our call *key* is cancelled."""
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": key, "reason": "cancelled by the launcher"},
    }
    return json.dumps(note).encode() + b"\n"


async def tell_cancelled(pipe: ChildPipe, key: str) -> None:
    with anyio.move_on_after(CANCEL_SEND_TIMEOUT, shield=True), suppress(ConnectionLost):
        await pipe.send(cancelled_note(key))
