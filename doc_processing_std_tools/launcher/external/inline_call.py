"""A relayed call served from event-loop callbacks alone, when nothing in it has to wait.

On the fast path (:mod:`.fast_path`) most calls to an external stdio server find the
process lock free and the child's stdin empty. Then no task is needed: the call is admitted
at once, the request is written at once, and the child's reply (picked off its stdout by
:class:`.child_pipe.ChildPipe`) finishes the call from the same callback: reply line written,
timer cancelled, the call ended. That saves a task, its cancel scopes and two passes of the
event loop per call: about 0.17 ms of the launcher's CPU per relayed call, 11% of calls/s
(``benchmarks/external.py``, 2026-12-06, measured with this path switched off).

The rules are the exposed tool's :class:`~..calls.policy.CallPolicy`, as on every path: it
admits the call (:meth:`~..calls.policy.CallPolicy.admit_now`: a server that is down, a lock
that is taken or a fleet lock leave the call to the task path, which waits; so do a full pipe
and a progress token), gives the timeout's text and a failure's answer, and ends the call
(:meth:`~..calls.policy.CallPolicy.end_now`). The timeout tells the child; the client's
cancellation tells the child and sends no reply.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from fastmcp.exceptions import ToolError

from ...telemetry import Outcome, result_outcome, traced_params
from ..calls.policy import Admission
from .child_pipe import ChildPipe, ConnectionLost, PendingCall, cancelled_note
from .relay_lines import child_request, client_reply, error_result
from .relay_targets import RelayTarget

log = logging.getLogger("dpt-launch")


@dataclass(eq=False, slots=True)
class _Call:
    target: RelayTarget
    request_id: int | str
    pipe: ChildPipe
    pending: PendingCall
    admission: Admission
    timer: asyncio.TimerHandle | None = None


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
        meta = params.get("_meta")
        if (
            supervisor is None
            or (pipe := supervisor.pipe) is None
            or not pipe.can_send_now()
            or (meta and "progressToken" in meta)
            or supervisor.state != "up"
        ):
            return False
        policy = target.policy
        admission = policy.admit_now(meta, params.get("arguments"))
        if admission is None:
            return False
        key = pipe.next_key()
        if admission.record is not None and admission.record.span is not None:
            params = traced_params(params, admission.record)  # its spans continue this call's
        try:
            sent = pipe.send_now(child_request(target.name, key, params))
        except BaseException:
            policy.end_now(admission, Outcome.ERROR)
            raise
        # The call is recorded, and its timer armed, once the child has it: the child starts on
        # the other CPU meanwhile. (Its reply is read on a later pass of the loop, never before
        # this returns.)
        pending = pipe.open_call(key)
        call = self._calls[request_id] = _Call(target, request_id, pipe, pending, admission)
        pending.on_settle = partial(self._replied, call)
        if not sent:
            pending.settle(lost=True)  # answered through on_settle
            return True
        call.timer = self._loop.call_later(policy.rules.timeout, self._expired, call)
        return True

    def cancel(self, request_id: int | str) -> bool:
        """The client cancelled *request_id*: tell the child, answer nothing. False if not here."""
        call = self._calls.get(request_id)
        if call is None:
            return False
        call.pipe.send_now(cancelled_note(call.pending.key))
        self._end(call, None, Outcome.CANCELLED)
        return True

    def cancel_all(self) -> None:
        for request_id in list(self._calls):
            self.cancel(request_id)

    def _replied(self, call: _Call, pending: PendingCall) -> None:
        try:
            if pending.lost:
                raise ToolError(
                    f"Error calling tool {call.target.exposed!r}: the connection closed"
                ) from ConnectionLost("the connection closed")
            reply = client_reply(
                pending.line, pending.parsed, pending.key, call.request_id, call.target.exposed
            )
            outcome = result_outcome(reply) if call.admission.record is not None else Outcome.OK
        except Exception as exc:
            failure = call.target.policy.failed(exc)
            reply, outcome = error_result(call.request_id, str(failure)), failure.outcome
        self._end(call, reply, outcome)

    def _expired(self, call: _Call) -> None:
        call.pipe.send_now(cancelled_note(call.pending.key))
        reply = error_result(call.request_id, call.target.policy.timeout_text())
        self._end(call, reply, Outcome.TIMEOUT)

    def _end(self, call: _Call, reply: bytes | None, outcome: Outcome) -> None:
        if self._calls.get(call.request_id) is not call:
            return  # already over
        if reply is not None:
            call.target.policy.answered_now(call.admission, outcome)  # (its audit line first)
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
        call.target.policy.end_now(call.admission, outcome)
        self._taken.discard(call.request_id)  # (FastPath._over's two steps, one call less)
        self._answered(call.request_id)
