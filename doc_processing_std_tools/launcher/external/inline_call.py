"""A relayed call served from event-loop callbacks alone, when nothing in it has to wait.

On the fast path (:mod:`.fast_path`) most calls to an external stdio server find the
process lock free and the child's stdin empty. Then no task is needed: the lock is
taken at once, the request is written at once, and the child's reply (picked off its
stdout by :class:`.child_pipe.ChildPipe`) finishes the call from the same callback:
reply line written, timer cancelled, lock released. That saves a task, two of its
steps, two cancel scopes and two passes of the event loop per call, a quarter of
the launcher's own CPU per relayed call (``benchmarks/external.py``).

The rules are the exposed tool's, as on every path (``GuardedTool``): a server that is
down, a lock that is taken, a full pipe or a progress token leave the call to the task
path, which waits; the timeout answers with the tool's own text and tells the child;
a lost connection answers with the tool's failure text (``restarting (attempt N)``);
the client's cancellation tells the child and sends no reply.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ... import telemetry as tm
from ...locking import PROCESS_LOCK, fleet_lock_in_use
from .child_pipe import ConnectionLost, cancelled_note
from .relay_lines import child_request, client_reply, error_result

if TYPE_CHECKING:
    from .child_pipe import ChildPipe, PendingCall
    from .targets import RelayTarget

log = logging.getLogger("dpt-launch")


@dataclass(eq=False, slots=True)
class _Call:
    target: RelayTarget
    request_id: int | str
    pipe: ChildPipe
    pending: PendingCall
    timer: asyncio.TimerHandle | None = None
    record: tm.CallRecord | None = None  # metrics and the span, when telemetry is on


class InlineCalls:
    """The relayed calls in flight without a task, on *loop*; *put* writes a reply line. When
    a call is over (answered or cancelled), its client id leaves *taken* (the fast path's
    set) and *answered* is told."""

    def __init__(
        self,
        put: Callable[[bytes], None],
        taken: set[int | str],
        answered: Callable[[int | str], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._put, self._taken, self._answered, self._loop = put, taken, answered, loop
        self._calls: dict[int | str, _Call] = {}

    def start(self, target: RelayTarget, request_id: int | str, params: dict[str, Any]) -> bool:
        """Send the call now, on the event loop; False (and nothing done) when it must wait."""
        supervisor = target.supervisor
        if (
            supervisor is None
            or (pipe := supervisor.pipe) is None
            or not pipe.can_send_now()
            or ((meta := params.get("_meta")) and "progressToken" in meta)
            or supervisor.state != "up"  # (unavailable(): GuardedTool.refusal's source)
        ):
            return False
        # (a locked tool's call holds the lock from here to _end; a fleet lock means a wait)
        if target.locked and (
            target.self_locking or fleet_lock_in_use() is not None or not PROCESS_LOCK.try_acquire()
        ):
            return False
        key = pipe.next_key()
        record = None
        telemetry = target.telemetry
        if telemetry is not None and telemetry.on:  # (this path's one place that observes)
            record = telemetry.begin(target.tool.label, target.exposed, meta)
            if record.span is not None:  # the server's spans continue this call's
                params = tm.traced_params(params, record)
        try:
            sent = pipe.send_now(child_request(target.name, key, params))
        except BaseException:
            if target.locked:
                PROCESS_LOCK.release()
            if record is not None:
                record.end(tm.ERROR)
            raise
        # The call is recorded, and its timer armed, once the child has it: the child starts on
        # the other CPU meanwhile. (Its reply is read on a later pass of the loop, never before
        # this returns.)
        pending = pipe.open_call(key)
        call = self._calls[request_id] = _Call(target, request_id, pipe, pending, record=record)
        if record is not None and target.locked:
            record.lock_waited(0.0)
        pending.on_settle = partial(self._replied, call)
        if not sent:
            pending.settle(lost=True)  # answered through on_settle
            return True
        call.timer = self._loop.call_later(target.timeout, self._expired, call)
        return True

    def cancel(self, request_id: int | str) -> bool:
        """The client cancelled *request_id*: tell the child, answer nothing. False if not here."""
        call = self._calls.get(request_id)
        if call is None:
            return False
        call.pipe.send_now(cancelled_note(call.pending.key))
        self._end(call, None, tm.CANCELLED)
        return True

    def cancel_all(self) -> None:
        for request_id in list(self._calls):
            self.cancel(request_id)

    def _replied(self, call: _Call, pending: PendingCall) -> None:
        try:
            if pending.lost:
                raise ConnectionLost("the connection closed")
            reply = client_reply(
                pending.line, pending.parsed, pending.key, call.request_id, call.target.exposed
            )
            outcome = tm.result_outcome(reply) if call.record is not None else tm.OK
        except Exception as exc:
            reply, outcome = self._failure(call, exc)
        self._end(call, reply, outcome)

    @staticmethod
    def _failure(call: _Call, exc: Exception) -> tuple[bytes, str]:
        """The error reply for a call whose reply could not be had or passed on, and its outcome."""
        from fastmcp.exceptions import ToolError

        guard = call.target.tool
        if isinstance(exc, ConnectionLost):
            lost = ToolError(f"Error calling tool {guard.name!r}: the connection closed")
            lost.__cause__ = exc
            return error_result(call.request_id, guard.failure_text(lost)), tm.UNAVAILABLE
        if isinstance(exc, ToolError):
            return error_result(call.request_id, guard.failure_text(exc)), tm.TOOL_ERROR
        # never a traceback, never a request left unanswered
        log.error("relaying %s failed", guard.name, exc_info=exc)
        text = f"Error calling tool {guard.name!r}: {exc}"[:1000]
        return error_result(call.request_id, text), tm.ERROR

    def _expired(self, call: _Call) -> None:
        call.pipe.send_now(cancelled_note(call.pending.key))
        reply = error_result(call.request_id, call.target.tool.timeout_text())
        self._end(call, reply, tm.TIMEOUT)

    def _end(self, call: _Call, reply: bytes | None, outcome: str) -> None:
        if self._calls.get(call.request_id) is not call:
            return  # already over
        if reply is not None:
            # First, so that the client can go on (on the other CPU) while the call is put away;
            # nothing else reaches the loop before this returns.
            self._put(reply)
        del self._calls[call.request_id]
        if call.timer is not None:
            call.timer.cancel()
        pending = call.pending
        pending.on_settle = None
        call.pipe.pending.pop(pending.key, None)  # (what pipe.forget does, one call less)
        call.pipe.progress.pop(pending.key, None)
        if call.target.locked:
            PROCESS_LOCK.release()
        if call.record is not None:
            call.record.end(outcome)
        self._taken.discard(call.request_id)  # (FastPath._over's two steps, one call less)
        self._answered(call.request_id)
