"""What one tool call reports to (:class:`CallRecord`, the current one in :data:`CURRENT_CALL`),
and a launcher's :class:`Telemetry`, which opens the records and holds its metrics and tracing."""

from __future__ import annotations

import contextvars
import errno
import logging
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .outcomes import Outcome

if TYPE_CHECKING:
    from .metrics import Metrics
    from .tracing import Tracing

log = logging.getLogger("dpt-launch")


CURRENT_CALL: contextvars.ContextVar[CallRecord | None] = contextvars.ContextVar(
    "dpt_current_call", default=None
)

_IS_ERROR = re.compile(rb'"isError"\s*:\s*true')


def store_failed() -> None:
    """A server's store (a folder, Redis) failed during the current call: counted once per call
    in ``dpt_store_errors_total`` of the call's server. A no-op outside an observed call."""
    record = CURRENT_CALL.get()
    if record is not None:
        record.store_failed = True


# errnos that say the store itself failed (not that the caller named a missing file)
_STORE_FAULTS = frozenset(
    getattr(errno, name)
    for name in (
        "EIO",
        "ENOSPC",
        "EDQUOT",
        "EROFS",
        "EACCES",
        "EPERM",
        "ESTALE",
        "ENOMEM",
        "EMFILE",
        "ENFILE",
        "EBUSY",
    )
    if hasattr(errno, name)
)


def note_store_fault(exc: BaseException) -> None:
    """:func:`store_failed` when *exc*, or the error it was raised while handling, is an
    ``OSError`` of the store itself (a full or read-only disk, an I/O error, no permission), or
    an error that says so itself (``store_fault = True``: a Redis that cannot be used)."""
    for error in (exc, exc.__cause__, exc.__context__):
        if getattr(error, "store_fault", False) is True or (
            isinstance(error, OSError) and error.errno in _STORE_FAULTS
        ):
            store_failed()
            return


def lock_waited(seconds: float) -> None:
    """The current call waited *seconds* for the process lock (``dpt_lock_wait_seconds``)."""
    record = CURRENT_CALL.get()
    if record is not None:
        record.lock_waited(seconds)


def traced_params(params: dict[str, Any], record: CallRecord | None = None) -> dict[str, Any]:
    """*params* of a call relayed to another server, its ``_meta`` carrying the trace context of
    this call's span (of *record*, else of the current call), so the server's own spans are its
    children; *params* itself when there is no span."""
    record = record or CURRENT_CALL.get()
    if record is None or record.span is None:
        return params
    carrier = record.trace_context()
    if not carrier:
        return params
    return {**params, "_meta": {**(params.get("_meta") or {}), **carrier}}


def result_outcome(result: Any) -> Outcome:
    """``ok`` or ``tool_error`` for what a tool answered: an SDK result dict (relayed), a reply
    line (the fast path) or a fastmcp ``ToolResult``."""
    if isinstance(result, dict):
        return Outcome.TOOL_ERROR if result.get("isError") else Outcome.OK
    if isinstance(result, bytes):
        error = b'"isError"' in result and _IS_ERROR.search(result)
        return Outcome.TOOL_ERROR if error else Outcome.OK
    return Outcome.TOOL_ERROR if getattr(result, "is_error", False) else Outcome.OK


class CallRecord:
    """One tool call being observed: its start, its span, its lock wait; :meth:`end` once."""

    __slots__ = (
        "_otel_token",
        "_telemetry",
        "_token",
        "label",
        "server",
        "span",
        "started",
        "store_failed",
        "tool",
    )

    def __init__(
        self, telemetry: Telemetry, server: str, tool: str, span: Any, label: str | None = None
    ) -> None:
        self._telemetry, self.server, self.tool, self.span = telemetry, server, tool, span
        self.label = tool if label is None else label  # the metrics' tool label
        self.store_failed = False
        self._token: contextvars.Token[CallRecord | None] | None = None
        self._otel_token: Any = None
        self.started = time.perf_counter()

    def enter(self) -> None:
        """Make this the current call (for lock waits and store failures in this context), and
        its span the current span (what fastmcp's proxy and any other instrumentation below
        take as their parent)."""
        self._token = CURRENT_CALL.set(self)
        if self.span is not None:
            self._otel_token = self._telemetry.tracing.attach(self.span)  # type: ignore[union-attr]

    def trace_context(self) -> dict[str, str]:
        """``traceparent`` (and ``tracestate``) naming this call's span as the parent."""
        tracing = self._telemetry.tracing
        return tracing.context_of(self.span) if tracing is not None and self.span else {}

    def lock_waited(self, seconds: float) -> None:
        metrics = self._telemetry.metrics
        if metrics is not None:
            metrics.lock_wait.labels(self.server).observe(seconds)

    def end(self, outcome: str) -> None:
        elapsed = time.perf_counter() - self.started
        if self._token is not None:
            CURRENT_CALL.reset(self._token)  # (enter and end run in the same task)
            self._token = None
            if self._otel_token is not None:
                self._telemetry.tracing.detach(self._otel_token)  # type: ignore[union-attr]
                self._otel_token = None
        metrics = self._telemetry.metrics
        if metrics is not None:
            metrics.observe(self.server, self.label, outcome, elapsed, self.store_failed)
        if self.span is not None:
            self._telemetry.tracing.finish(self.span, outcome)  # type: ignore[union-attr]


class Telemetry:
    """A launcher's metrics and tracing; :attr:`on` is False (and calls cost one test) until
    :meth:`enable_metrics` or a tracer provider turns one on."""

    def __init__(self, tracing: Tracing | None = None) -> None:
        self.metrics: Metrics | None = None
        self.tracing = tracing
        self.on = tracing is not None

    def enable_metrics(self) -> Metrics | None:
        """Collect metrics from now on (what ``/metrics`` shows); None without prometheus_client."""
        if self.metrics is None:
            try:
                # (here, not at the top: prometheus_client takes 37 ms to import)
                from .metrics import Metrics

                self.metrics = Metrics()
            except ImportError:
                log.warning("metrics are off: prometheus-client is not installed")
                return None
            self.on = True
        return self.metrics

    def begin(
        self,
        server: str,
        tool: str,
        meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        metric_tool: str | None = None,
    ) -> CallRecord:
        """Start observing a call of *tool* (exposed name) of *server* (mount name), counted in
        the metrics under *metric_tool* when given (a bounded label for names a client chose).
        The span's parent is the trace context of the call's ``_meta`` (``traceparent``), else
        of the HTTP request's headers."""
        span = None
        if self.tracing is not None:
            span = self.tracing.start(server, tool, meta, headers)
        return CallRecord(self, server, tool, span, metric_tool)

    def shutdown(self) -> None:
        """Send the spans still buffered (the OTLP exporter's batch)."""
        if self.tracing is not None:
            self.tracing.shutdown()
