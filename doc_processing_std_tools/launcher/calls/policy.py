"""Everything decided and recorded about a call of one exposed tool, on every path.

A call is first admitted: refused at once while its external server is down, then given its
deadline (``servers.<name>.timeout``, counted from the call's arrival, so a wait for the
process lock or for a server still starting uses it up), then let in under the lock its tool
needs (:class:`LockMode`). It ends with an outcome, reported once to the call's metrics and
span, and, when it failed, with the answer the client reads (:class:`.failures.CallFailed`).

Beyond its tool's own rules, a call answers to its composition's :class:`~.guards.CallGuards`
(when the config asks for access rules, an audit log or rate limits): a call its caller may not
make (``access:``), then a call over a limit, is refused before anything else, and every call's
audit line is written at its end, before its answer is sent.

Every path awaits the call through :meth:`CallPolicy.run` (or :meth:`CallPolicy.around_fastmcp`
for a tool fastmcp calls). A second way, serving a relayed call from event-loop callbacks when
nothing in it had to wait, was measured and removed: it saved 0.02 ms of the launcher's CPU per
call (0.14 against 0.16 ms) and no calls/s (140 against 141 calls/s, ``benchmarks/external.py
--compare``), against the 10% a second copy of the rules would have to buy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

import anyio
from fastmcp.exceptions import ToolError

from ...locking import (
    CALL_ARRIVAL,
    CALL_DEADLINE,
    CURRENT_FENCE,
    LockWaitTimeout,
    admit_self_locking,
    hold_async,
)
from ...locking.fleet_lock import FENCE_META_KEY, FleetLockLost, FleetLockUnavailable
from ...seams.fastmcp_server import request_sources
from ...telemetry import CallRecord, Outcome, Telemetry, result_outcome, traced_params
from .access import Access
from .audit import Caller, CallNote, trace_id_of
from .failures import CallFailed
from .guards import CallGuards
from .rate_limits import RateLimited, RateLimits

log = logging.getLogger("dpt-launch")
T = TypeVar("T")
QUOTE_LIMIT = 1000  # characters of an unexpected error quoted in an answer


class LockMode(Enum):
    """Who takes the process lock (and the fleet lock) for a call of a tool."""

    NONE = "none"  # read-only, or ``lock: never``
    HELD = "held"  # the launcher holds it for the whole call
    ADMITTED = "admitted"  # the server takes it around its disk work; the launcher admits the call


@dataclass(frozen=True, slots=True)
class ToolRules:
    """What the composition decided for one exposed tool."""

    server: str  # the mount name (``servers.<name>``)
    tool: str  # the exposed name, as the composition names it
    lock: LockMode
    timeout: float  # seconds (``servers.<name>.timeout``)
    # why a call cannot start now (its external server is down), or None
    unavailable: Callable[[], str | None] | None = None
    # what a call that failed with an error answers instead (a lost server says it restarts)
    call_failed: Callable[[BaseException], str | None] | None = None
    # why no call is let in at all: its definition is not the approved one (pin_gate.py)
    withheld: str | None = None
    # the audit line's pin status: "pinned", or what the lock file found ("changed", "not
    # pinned", "hidden text": served under pins.policy: warn); None without a lock file
    pin: str | None = None
    # the metrics' ``tool`` label when not *tool*: a name a client chose (an unlisted call's)
    # must not add a series per name
    metric_tool: str | None = None


class CallPolicy:
    """The rules of one exposed tool's calls, and where each call reports how it ended."""

    __slots__ = ("_guards", "_telemetry", "rules")

    def __init__(
        self,
        rules: ToolRules,
        telemetry: Telemetry | None = None,
        guards: CallGuards | None = None,
    ) -> None:
        self.rules = rules
        self._telemetry = telemetry
        self._guards = guards

    @property
    def tracing(self) -> bool:
        """Whether calls are traced (a relayed call then carries its span's context)."""
        return self._telemetry is not None and self._telemetry.tracing is not None

    # -- the texts a client reads ----------------------------------------------------------

    def refusal(self) -> str | None:
        """Why a call cannot start now (its definition is not approved, its server is down), or
        None."""
        rules = self.rules
        if rules.withheld is not None:
            return rules.withheld
        unavailable = rules.unavailable
        return unavailable() if unavailable is not None else None

    def timeout_text(self, *, waited_for_lock: bool = False) -> str:
        rules = self.rules
        if waited_for_lock:
            return (
                f"{rules.tool!r} did not start within its timeout of {rules.timeout:g} s: "
                "another call that changes state held the process lock all that time; "
                f"nothing was done (servers.{rules.server}.timeout)"
            )
        return (
            f"server {rules.server!r} did not finish {rules.tool!r} within its "
            f"timeout of {rules.timeout:g} s (servers.{rules.server}.timeout)"
        )

    def failed(self, exc: BaseException) -> CallFailed:
        """The answer, and the outcome, of a call that failed with *exc*, on any path."""
        if isinstance(exc, CallFailed):
            return exc
        if isinstance(exc, LockWaitTimeout) or isinstance(exc.__cause__, LockWaitTimeout):
            return CallFailed(self.timeout_text(waited_for_lock=True), Outcome.LOCK_TIMEOUT)
        for error in (exc, exc.__cause__):
            if isinstance(error, FleetLockUnavailable):
                return CallFailed(str(error), Outcome.UNAVAILABLE)
            if isinstance(error, FleetLockLost):
                return CallFailed(str(error), Outcome.LOCK_LOST)
        if isinstance(exc, ToolError):
            call_failed = self.rules.call_failed
            replacement = call_failed(exc) if call_failed is not None else None
            if replacement and replacement != str(exc):
                return CallFailed(replacement, Outcome.UNAVAILABLE, log_level=exc.log_level)
            return CallFailed(str(exc), Outcome.TOOL_ERROR, log_level=exc.log_level)
        # never a traceback in an answer, never a request left unanswered
        log.error("calling %s failed", self.rules.tool, exc_info=exc)
        text = f"Error calling tool {self.rules.tool!r}: {exc}"[:QUOTE_LIMIT]
        return CallFailed(text, Outcome.ERROR)

    # -- what a relayed call carries ---------------------------------------------------------

    def relayed_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """*params* of a call relayed to its server, their ``_meta`` carrying what the server
        should know of this call: its span's trace context (the server's spans continue it) and
        the fencing number of the fleet lock's grant it holds (:data:`FENCE_META_KEY`)."""
        if self.tracing:
            params = traced_params(params)
        fence = CURRENT_FENCE.get()
        if fence is not None:
            params = {**params, "_meta": {**(params.get("_meta") or {}), FENCE_META_KEY: fence}}
        return params

    # -- a call awaited --------------------------------------------------------------------

    async def run(
        self,
        call: Callable[[], Awaitable[T]],
        *,
        meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        session: Any = None,
        arguments: Any = None,
    ) -> T:
        """Await *call* under this tool's rules, reported as one call.

        Raises :class:`CallFailed` when the call was refused or cut short, or failed in a way
        the launcher answers for (a lost server); the tool's own ``ToolError`` and any other
        exception pass on unchanged (the in-process path lets fastmcp answer them: its error
        masking applies). *meta* (the call's ``_meta``) and *headers* (its HTTP request's)
        carry the trace context the call's span continues. *session* (the MCP server session,
        None on the stdio fast path), *headers* and *arguments* tell the guards who calls, and
        with what.
        """
        telemetry, guards = self._telemetry, self._guards
        observed = telemetry is not None and telemetry.on
        if not observed and guards is None:
            return await self._admitted(call)
        record = None
        if observed:
            assert telemetry is not None
            rules = self.rules
            record = telemetry.begin(
                rules.server, rules.tool, meta, headers, metric_tool=rules.metric_tool
            )
            record.enter()
        note = None
        outcome = Outcome.ERROR
        try:
            if guards is not None:
                caller = guards.caller(session, headers)
                note = guards.begin(caller, arguments, meta, headers)
                if guards.access is not None:
                    self._admit(guards.access, caller)
                if guards.limits is not None:
                    await self._take(guards.limits, caller)
            result = await self._admitted(call)
            outcome = result_outcome(result)
            return result
        except CallFailed as exc:
            outcome = exc.outcome
            raise
        except ToolError:
            outcome = Outcome.TOOL_ERROR
            raise
        except anyio.get_cancelled_exc_class():
            outcome = Outcome.CANCELLED
            raise
        finally:
            if note is not None:  # (before the answer: the caller sends it once this returns)
                self._audit(note, outcome, record)
            if record is not None:
                record.end(outcome)

    def _admit(self, access: Access, caller: Caller) -> None:
        rules = self.rules
        refusal = access.tool_refusal(caller, rules.server, rules.tool)
        if refusal is not None:
            log.warning("%s (server %r)", refusal, rules.server)
            raise CallFailed(refusal, Outcome.DENIED, log_level=logging.INFO)

    async def _take(self, limits: RateLimits, caller: Caller) -> None:
        try:
            await limits.take(caller.user or "", self.rules.tool)
        except RateLimited as exc:
            raise CallFailed(str(exc), Outcome.RATE_LIMITED, log_level=logging.INFO) from None

    def _audit(self, note: CallNote, outcome: Outcome, record: CallRecord | None) -> None:
        trace_id = None
        if record is not None and record.span is not None:
            trace_id = trace_id_of(record.trace_context(), None)
        assert self._guards is not None
        rules = self.rules
        self._guards.end(note, rules.server, rules.tool, outcome, trace_id, rules.pin)

    async def around_fastmcp(self, call: Callable[[], Awaitable[T]], arguments: Any = None) -> T:
        """:meth:`run` for a call fastmcp is serving: its ``_meta``, HTTP headers and session
        are those of fastmcp's request."""
        telemetry = self._telemetry
        if self._guards is not None or (telemetry is not None and telemetry.tracing is not None):
            meta, headers, session = request_sources()
            return await self.run(
                call, meta=meta, headers=headers, session=session, arguments=arguments
            )
        return await self.run(call)

    async def _admitted(self, call: Callable[[], Awaitable[T]]) -> T:
        reason = self.refusal()
        if reason:
            withheld = self.rules.withheld is not None
            raise CallFailed(reason, Outcome.REFUSED if withheld else Outcome.UNAVAILABLE)
        rules = self.rules
        # (a call that already waited, for a server still starting, has less time left)
        arrived = CALL_ARRIVAL.get()
        budget = rules.timeout
        if arrived is not None:
            budget = max(0.0, arrived + rules.timeout - time.monotonic())
        # (a server that locks itself waits for the lock in a worker thread, which the
        # timeout cannot cancel: the deadline bounds that wait instead)
        deadline = CALL_DEADLINE.set(time.monotonic() + budget)
        locked = False
        try:
            with anyio.fail_after(budget):
                if rules.lock is LockMode.NONE:
                    return await call()
                hold = admit_self_locking() if rules.lock is LockMode.ADMITTED else hold_async()
                async with hold:
                    locked = True
                    return await call()
        except (LockWaitTimeout, FleetLockUnavailable, FleetLockLost, ToolError) as exc:
            failure = self.failed(exc)
            if failure.outcome is Outcome.TOOL_ERROR and isinstance(exc, ToolError):
                raise  # the tool's own answer, unchanged
            raise failure from None
        except TimeoutError:
            waited = rules.lock is not LockMode.NONE and not locked
            outcome = Outcome.LOCK_TIMEOUT if waited else Outcome.TIMEOUT
            raise CallFailed(self.timeout_text(waited_for_lock=waited), outcome) from None
        finally:
            CALL_DEADLINE.reset(deadline)
