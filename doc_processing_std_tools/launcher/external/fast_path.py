"""The stdio fast path of a plain ``tools/call``: raw JSON lines in, one line out, no SDK.

Two kinds of tools are served here (the table is :meth:`.relay.ToolRelay.fast_targets`):

* **an external stdio server's** (``command:``). Through the SDK a relayed call was
  validated and rebuilt four times and crossed two dispatchers: about 1.8 ms of the
  launcher's CPU per call, against ~2.7 ms for the call itself
  (``benchmarks/external.py``). :class:`.child_pipe.ChildPipe` owns the command's
  stdin and stdout and hands replies to our own requests (ids ``"dpt~N"``) straight
  to the waiting call; the request goes to the child with the server's own tool name
  and our id, and the child's reply line goes back with the client's id, spliced, not
  re-encoded, when it is the SDK's usual shape and clean.
* **an in-process tool with a plain call** (``targets.PLAIN_CALL``: popoto-memory's), whose
  server has fastmcp's defaults: its ``(text, is_error)`` is written as the SDK path
  would write it. fastmcp's per-call machinery cost more than popoto's own server
  spends on a ``memory_save`` (``benchmarks/popoto_bench.py``).

:class:`FastPath` is handed each line the client writes (``launcher/transports/stdio.py``, on the
event loop, or in the reader thread when stdin cannot be polled). A plain ``tools/call``
of such a tool on a handshake-era connection is taken (``json.loads``, a dict lookup)
and served on the event loop, under the exposed tool's rules as on every path
(its ``CallPolicy``: unavailable, process lock, timeout, restarting; a relayed
call cut short is cancelled at the child). A client's ``notifications/cancelled`` for
a taken call cancels it. Anything else, and anything unusual (lone-surrogate escapes,
extra params, 2026-era envelopes), keeps the SDK path. Which calls are taken
(:func:`relayed_call`) and how one goes down a child's pipe (:func:`forward_on_pipe`) are
shared with the HTTP fast path (``launcher/transports/http_fast_path.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from json.scanner import make_scanner
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from fastmcp.exceptions import ToolError

from .child_pipe import (
    CONNECTION_META_PREFIX,
    JSON_SPACE,
    SURROGATE_ESCAPE,
    ConnectionLost,
    tell_cancelled,
)
from .relay_lines import (
    HANDSHAKE_ERA,
    ErrorReply,
    child_request,
    client_reply,
    encode_line,
    error_reply,
    error_result,
)

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from .child_pipe import ChildPipe
    from .relay_targets import RelayTarget

log = logging.getLogger("dpt-launch")

CALL_PARAMS = frozenset({"name", "arguments", "_meta"})
SEARCH_FIRST = 1 << 12  # bytes: a longer call line is searched for a target's name before parsing
REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})


class TargetTable(Protocol):
    """Where the fast path asks, per call, which tools it may serve (``relay.ToolRelay``)."""

    def fast_targets(self) -> dict[str, RelayTarget]: ...


class FastPath:
    """Serves relayed ``tools/call`` lines from the client without the SDK's dispatchers.

    :meth:`take` runs where stdin is read (the event loop, or the reader thread for stdin
    the loop cannot poll); everything else on the event loop.
    """

    def __init__(self, relay: TargetTable) -> None:
        self._relay = relay
        self.initialize_id: Any = None  # the client's initialize request (set by the reader)
        self.enabled = False  # the connection negotiated a handshake-era version
        self._taken: set[int | str] = set()  # client ids in flight here (the reader adds)
        self._scopes: dict[int | str, anyio.CancelScope] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._group: TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._put: Callable[[bytes], None] = lambda line: None
        self._expect: Callable[[Any], None] = lambda request_id: None
        self._answered: Callable[[Any], None] = lambda request_id: None

    def bind(
        self,
        group: TaskGroup,
        put: Callable[[bytes], None],
        expect: Callable[[Any], None],
        answered: Callable[[Any], None],
    ) -> None:
        """Serve on the running loop: calls run in *group*, replies go to *put* (one line each)."""
        self._loop = asyncio.get_running_loop()
        self._group = group
        self._put, self._expect, self._answered = put, expect, answered
        group.start_soon(self._cancel_calls_at_exit)

    async def _cancel_calls_at_exit(self) -> None:
        """Sleep for as long as serving goes on; then cancel the calls still running."""
        try:
            await anyio.sleep_forever()
        finally:
            for task in list(self._tasks):
                task.cancel()

    def negotiated(self, result: Any) -> None:
        """The reply to the client's initialize went out: is the fast path allowed?"""
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        self.enabled = version in HANDSHAKE_ERA

    # -- where stdin is read -----------------------------------------------------------------

    def take(self, line: bytes, *, on_loop: bool = False) -> bool:
        """Serve *line* here if it is a relayed call or a cancellation of one.

        Called by the stdin reader: on the event loop itself (*on_loop*), or in a thread.
        (One function for the whole decision: each Python call costs microseconds per
        relayed call, ``benchmarks/external.py``.)
        """
        if not self.enabled or self._loop is None:
            return False
        try:
            # (find, not "in": bytes.__contains__ first tries its operand as an integer, and
            # raises and formats a TypeError each time; 0.1-0.25 us warm, a few us per call here)
            if line.find(b'"tools/call"') < 0:
                return bool(
                    self._taken
                    and line.find(b'"notifications/cancelled"') >= 0
                    and self._take_cancel(line, on_loop)
                )
            found = relayed_call(line, self._relay.fast_targets())
            if found is None:
                return False
            target, request_id, params = found
            if request_id in self._taken or (
                target.plain_call is None and getattr(target.supervisor, "pipe", None) is None
            ):
                return False  # the child is down: the SDK path says so
            self._taken.add(request_id)
            self._expect(request_id)
        except Exception:  # whatever is odd about the line, the SDK path answers it
            log.debug("fast path: left a line to the SDK", exc_info=True)
            return False
        if not on_loop:
            try:
                self._loop.call_soon_threadsafe(self._begin, target, request_id, params)
            except RuntimeError:  # the loop is gone
                self._over(request_id)
            return True
        try:
            self._start(target, request_id, params)
        except Exception:
            log.exception("fast path: could not start a call; the SDK path answers it")
            self._over(request_id)
            return False
        return True

    def _take_cancel(self, line: bytes, on_loop: bool) -> bool:
        request_id = cancelled_request(line)
        if request_id is None or request_id not in self._taken:
            return False
        if on_loop:
            self._cancel(request_id)
            return True
        with suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._cancel, request_id)  # type: ignore[union-attr]
        return True

    # -- event loop ------------------------------------------------------------------------

    def _begin(self, target: RelayTarget, request_id: int | str, params: dict[str, Any]) -> None:
        self._start(target, request_id, params)

    def _over(self, request_id: int | str) -> None:
        """A call taken here is over (answered, cancelled or left to the SDK)."""
        self._taken.discard(request_id)
        self._answered(request_id)

    def _start(self, target: RelayTarget, request_id: int | str, params: dict[str, Any]) -> None:
        # A plain asyncio task: a third of the cost of a task group's spawn. They are kept in
        # _tasks and cancelled with the group (see bind), so none outlives serving.
        scope = self._scopes[request_id] = anyio.CancelScope()
        assert self._loop is not None
        self._tasks.add(self._loop.create_task(self._serve(target, request_id, params, scope)))

    def _cancel(self, request_id: int | str) -> None:
        scope = self._scopes.get(request_id)
        if scope is not None:
            scope.cancel()

    async def _serve(
        self,
        target: RelayTarget,
        request_id: int | str,
        params: dict[str, Any],
        scope: anyio.CancelScope,
    ) -> None:
        reply = b""
        call = _call_plainly if target.plain_call is not None else self._forward
        try:
            with scope:
                reply = await answered(
                    target, request_id, params, lambda: call(target, request_id, params)
                )
            if not scope.cancelled_caught:  # a call the client cancelled gets no reply
                self._put(reply)
        finally:
            self._tasks.discard(asyncio.current_task())
            self._scopes.pop(request_id, None)
            self._over(request_id)

    async def _forward(
        self, target: RelayTarget, request_id: int | str, params: dict[str, Any]
    ) -> bytes:
        """Send the call to the child; its reply, as the line for the client."""
        supervisor = target.supervisor
        assert supervisor is not None  # (a relayed tool)
        pipe: ChildPipe | None = getattr(supervisor, "pipe", None)
        if pipe is None:
            raise supervisor.not_connected() from ConnectionLost("the connection closed")
        pipe.write_note = self._put
        meta = params.get("_meta") or {}
        progress = self._progress_sender(meta["progressToken"]) if "progressToken" in meta else None
        return await forward_on_pipe(pipe, target, request_id, params, progress)

    def _progress_sender(self, token: Any) -> Callable[[dict[str, Any]], None]:
        def send(params: dict[str, Any]) -> None:
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {**params, "progressToken": token},
            }
            with suppress(ValueError):
                self._put(json.dumps(note, separators=(",", ":")).encode() + b"\n")

        return send


def relayed_call(
    line: bytes, targets: Mapping[str, RelayTarget]
) -> tuple[RelayTarget, int | str, dict[str, Any]] | None:
    """*line*'s target, request id and params when it is one plain ``tools/call`` of one of
    *targets* (the rules of every fast path: stdio's here, HTTP's in
    ``transports/http_fast_path.py``); None for anything else, which the SDK path answers."""
    # A long line is decided without parsing when it can be: a 16 MB write_memory is
    # parsed once, by the SDK. A short one is parsed sooner than searched.
    if not targets or (len(line) > SEARCH_FIRST and not _names_a_target(line, targets)):
        return None
    if line.find(b"\\u") >= 0 and SURROGATE_ESCAPE.search(line):
        return None  # the SDK path answers text that is not valid Unicode
    message = _message(line, "tools/call")
    if message is None:
        return None
    request_id, params = message.get("id"), message.get("params")
    if (
        message.get("jsonrpc") != "2.0"
        or not isinstance(request_id, (str, int))  # (a tuple: no union made per call)
        or isinstance(request_id, bool)
        or not REQUEST_KEYS.issuperset(message)
        or not isinstance(params, dict)
        or not CALL_PARAMS.issuperset(params)
        or ((args := params.get("arguments")) is not None and type(args) is not dict)
        or not _plain_meta(params.get("_meta"))
    ):
        return None
    name = params.get("name")
    target = targets.get(name) if isinstance(name, str) else None
    if target is None:
        return None  # not ours: the SDK path says so
    return target, request_id, params


def cancelled_request(line: bytes) -> int | str | None:
    """The request id a ``notifications/cancelled`` on *line* names, else None."""
    message = _message(line, "notifications/cancelled")
    params = message.get("params") if message is not None else None
    request_id = params.get("requestId") if isinstance(params, dict) else None
    return request_id if isinstance(request_id, str | int) else None


async def forward_on_pipe(
    pipe: ChildPipe,
    target: RelayTarget,
    request_id: int | str,
    params: dict[str, Any],
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> bytes:
    """Send the call to the child on *pipe* with our own id; its reply, as the line for the
    client. *progress*: where the child's progress reports go (the client's token stays on
    its connection: the child gets ours)."""
    supervisor = target.supervisor
    assert supervisor is not None  # (a relayed tool)
    call = pipe.open_call()
    if progress is not None:
        pipe.progress[call.key] = progress
    try:
        params = target.policy.relayed_params(params)
        data = child_request(target.name, call.key, params, progress is not None)
        try:
            await pipe.send(data)
            line, parsed = await call.reply()
        except ConnectionLost as exc:
            raise ToolError(
                f"Error calling tool {target.exposed!r}: the connection closed"
            ) from exc
        except BaseException:
            if not call.settled:  # cancelled, timed out: tell the child
                await tell_cancelled(pipe, call.key)
            raise
    finally:
        pipe.forget(call)
    namespace = supervisor.entry.namespace
    return client_reply(line, parsed, call.key, request_id, target.exposed, namespace)


async def answered(
    target: RelayTarget,
    request_id: int | str,
    params: dict[str, Any],
    call: Callable[[], Awaitable[bytes]],
    *,
    headers: Mapping[str, str] | None = None,
    session: Any = None,
) -> bytes:
    """The line answering a taken call (both fast paths): *call* under its tool's policy (who
    calls: *headers* and *session*, over HTTP); the server's own JSON-RPC error as it is, any
    other failure as the policy words it: never a traceback, never a request left unanswered."""
    try:
        return await target.policy.run(
            call,
            meta=params.get("_meta"),
            headers=headers,
            session=session,
            arguments=params.get("arguments"),
        )
    except ErrorReply as exc:
        return error_reply(request_id, exc.error)
    except Exception as exc:
        return error_result(request_id, str(target.policy.failed(exc)))


def _plain_meta(meta: Any) -> bool:
    """A _meta the SDK accepts (absent, null, or an object whose progressToken is a string or
    an integer, not a boolean) with no 2026-era connection keys (those keep the SDK path, as does anything
    the SDK refuses: it answers that)."""
    if meta is None:
        return True
    if not isinstance(meta, dict):
        return False
    token = meta.get("progressToken", "")
    if isinstance(token, bool) or not isinstance(token, str | int):  # (a bool is an int)
        return False
    return not any(str(key).startswith(CONNECTION_META_PREFIX) for key in meta)


# The C scanner behind json.loads, called directly: json.loads adds three Python frames.
# (typeshed types make_scanner's argument as itself)
_SCAN: Callable[[str, int], tuple[Any, int]] = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _message(line: bytes, method: str) -> dict[str, Any] | None:
    """The JSON object on *line* when it is a *method* message, else None."""
    try:  # (UTF-8 that is not valid, surrogates included, and leading space keep the SDK path)
        text = line.decode()
        message, end = _SCAN(text, 0)
    except (ValueError, RecursionError, StopIteration):
        return None
    if end < len(text) and text[end:].strip(JSON_SPACE):
        return None  # more than one value, or a character JSON does not allow
    if not isinstance(message, dict) or message.get("method") != method:
        return None
    return message


_NAME_VALUE = re.compile(rb'\s*:\s*"((?:[^"\\]|\\.)*)"')


def _names_a_target(line: bytes, targets: Mapping[str, Any]) -> bool:
    """Whether some ``"name": "..."`` member on *line* is one of *targets*' names.

    Inside a JSON string every quote is escaped, so ``"name"`` followed by a colon is always
    a key; a call whose tool is not in the table is told apart without parsing the line.
    """
    if not targets:
        return False
    start = 0
    while (at := line.find(b'"name"', start)) >= 0:
        start = at + 6
        match = _NAME_VALUE.match(line, start)
        if match is None:
            continue
        raw = match.group(1)
        try:
            name = raw.decode() if b"\\" not in raw else json.loads(b'"' + raw + b'"')
        except (ValueError, UnicodeDecodeError):
            continue
        if name in targets:
            return True
    return False


async def _call_plainly(
    target: RelayTarget, request_id: int | str, params: dict[str, Any]
) -> bytes:
    """An in-process tool's plain call; its answer as the line for the client, shaped as the
    SDK path writes it."""
    assert target.plain_call is not None
    text, is_error = await target.plain_call(params.get("arguments") or {})
    result = {"content": [{"text": text, "type": "text"}], "isError": is_error}
    return encode_line({"jsonrpc": "2.0", "id": request_id, "result": result})
