"""Numbers for the people who run a launcher: Prometheus metrics and OpenTelemetry spans per tool call.

One :class:`Telemetry` per launcher (a composition), with its own prometheus
``CollectorRegistry`` and its own ``TracerProvider``: several launchers (or tests) in one
process never share a series or a span. Every path a tool call can take reports through
one :class:`CallRecord`, opened and closed by the launcher's call policy
(``launcher/calls/policy.py``), the one place every path goes through. Lock waits are reported by
:mod:`.locking`, store failures by the servers (:func:`store_failed`), both to the record of
the call they happen in (a context variable, which worker threads inherit).

Nothing here imports prometheus_client or opentelemetry until a launcher asks for metrics
or tracing: importing the package, or a launcher without either, pays nothing.
"""

from __future__ import annotations

import contextvars
import errno
import logging
import re
import time
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

log = logging.getLogger("dpt-launch")


class Outcome(StrEnum):
    """What a call ended as: the ``outcome`` label of its metrics and its span's attribute."""

    OK = "ok"
    TOOL_ERROR = (
        "tool_error"  # the tool answered isError (a refusal, a failed store, a remote error)
    )
    TIMEOUT = "timeout"  # servers.<name>.timeout passed while the call ran
    LOCK_TIMEOUT = "lock_timeout"  # the timeout passed while the call waited for the process lock
    UNAVAILABLE = "unavailable"  # the external server was down or restarting, or went away mid-call
    REFUSED = "refused"  # the launcher's rules let no call of it in (an unapproved definition)
    LOCK_LOST = "lock_lost"  # the fleet lock's lease ran out during the call (lock.lease)
    CANCELLED = "cancelled"  # the client cancelled it (or the launcher stopped)
    RATE_LIMITED = "rate_limited"  # over a limit of rate_limits: refused, nothing was done
    ERROR = "error"  # anything else: an unexpected exception


# Seconds; a tool call takes from ~50 us (a popoto search) to its timeout (60 s by default).
CALL_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
)
LOCK_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60)

SPAN_SERVER = "dpt.server"  # the mount name (servers.<name>)
SPAN_TOOL = "dpt.tool"  # the exposed tool name
SPAN_OUTCOME = "dpt.outcome"  # an Outcome

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
        error = result.find(b'"isError"') >= 0 and _IS_ERROR.search(result)
        return Outcome.TOOL_ERROR if error else Outcome.OK
    return Outcome.TOOL_ERROR if getattr(result, "is_error", False) else Outcome.OK


class CallRecord:
    """One tool call being observed: its start, its span, its lock wait; :meth:`end` once."""

    __slots__ = (
        "_otel_token",
        "_telemetry",
        "_token",
        "server",
        "span",
        "started",
        "store_failed",
        "tool",
    )

    def __init__(self, telemetry: Telemetry, server: str, tool: str, span: Any) -> None:
        self._telemetry, self.server, self.tool, self.span = telemetry, server, tool, span
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
            metrics.observe(self.server, self.tool, outcome, elapsed, self.store_failed)
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
    ) -> CallRecord:
        """Start observing a call of *tool* (exposed name) of *server* (mount name). The span's
        parent is the trace context of the call's ``_meta`` (``traceparent``), else of the HTTP
        request's headers."""
        span = None
        if self.tracing is not None:
            span = self.tracing.start(server, tool, meta, headers)
        return CallRecord(self, server, tool, span)

    def shutdown(self) -> None:
        """Send the spans still buffered (the OTLP exporter's batch)."""
        if self.tracing is not None:
            self.tracing.shutdown()


class Metrics:
    """The Prometheus series of one launcher, in a registry of its own."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter(
            "dpt_tool_calls",
            "Tool calls answered, by server, tool and outcome.",
            ("server", "tool", "outcome"),
            registry=self.registry,
        )
        self.duration = Histogram(
            "dpt_tool_call_duration_seconds",
            "Time from a call's arrival at the launcher's rules to its answer.",
            ("server", "tool"),
            buckets=CALL_BUCKETS,
            registry=self.registry,
        )
        self.lock_wait = Histogram(
            "dpt_lock_wait_seconds",
            "Time a call waited for the process lock, by the server of the call.",
            ("server",),
            buckets=LOCK_BUCKETS,
            registry=self.registry,
        )
        self.store_errors = Counter(
            "dpt_store_errors",
            "Calls whose store (memory folder, Redis) failed, by server.",
            ("server",),
            registry=self.registry,
        )
        self.gauges = _Gauges()
        self.registry.register(self.gauges)
        # (server, tool) -> (its duration child, {outcome: its counter child}): labels() is a
        # locked dict look-up and a tuple per call; this is one dict look-up.
        self._children: dict[tuple[str, str], tuple[Any, dict[str, Any]]] = {}

    def observe(
        self, server: str, tool: str, outcome: str, elapsed: float, store_failed: bool
    ) -> None:
        children = self._children.get((server, tool))
        if children is None:
            children = self._children[(server, tool)] = (self.duration.labels(server, tool), {})
        counter = children[1].get(outcome)
        if counter is None:
            counter = children[1][outcome] = self.calls.labels(server, tool, outcome)
        counter.inc()
        children[0].observe(elapsed)
        if store_failed:
            self.store_errors.labels(server).inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


EXTERNAL_STATES = ("starting", "up", "restarting", "failed")


class _Gauges:
    """What is read, not counted: asked of the launcher at each scrape. Each source is set
    by whoever knows it (the composition: external servers; the HTTP transport: sessions and
    connections)."""

    def __init__(self) -> None:
        # each external server's state and restarts, by mount name
        self.states: Callable[[], Mapping[str, str]] = dict
        self.restarts: Callable[[], Mapping[str, int]] = dict
        self.sessions: Callable[[], int] | None = None  # open MCP sessions
        self.connections: Callable[[], int] | None = None  # open HTTP connections
        self.fleet_lock_lost: Callable[[], int] | None = None  # grants lost during a call
        self.pins_drifted: Callable[[], int] | None = None  # definitions not as approved

    def describe(self) -> list[Any]:
        return []  # (collected at scrape time only)

    def collect(self) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        state = GaugeMetricFamily(
            "dpt_external_server_state",
            "1 for the state each external server is in, 0 for the others.",
            labels=("server", "state"),
        )
        for server, now in sorted(self.states().items()):
            for name in (*EXTERNAL_STATES, *((now,) if now not in EXTERNAL_STATES else ())):
                state.add_metric((server, name), 1.0 if name == now else 0.0)
        restarts = CounterMetricFamily(
            "dpt_external_server_restarts",
            "Times each external server's session ended and was started again.",
            labels=("server",),
        )
        for server, count in sorted(self.restarts().items()):
            restarts.add_metric((server,), float(count))
        found = [state, restarts]
        if self.sessions is not None:
            found.append(
                GaugeMetricFamily(
                    "dpt_open_sessions", "Open MCP sessions (HTTP).", value=self.sessions()
                )
            )
        if self.connections is not None:
            found.append(
                GaugeMetricFamily(
                    "dpt_open_connections", "Open HTTP connections.", value=self.connections()
                )
            )
        if self.fleet_lock_lost is not None:
            found.append(
                CounterMetricFamily(
                    "dpt_fleet_lock_lost",
                    "Calls during which the fleet lock's lease ran out (lock.lease).",
                    value=self.fleet_lock_lost(),
                )
            )
        if self.pins_drifted is not None:
            found.append(
                GaugeMetricFamily(
                    "dpt_pinned_definitions_drifted",
                    "Tool, prompt and resource template definitions that differ from the lock "
                    "file, are not in it, are gone, or hold hidden text (pins).",
                    value=self.pins_drifted(),
                )
            )
        return found


class Tracing:
    """One span per tool call, from a ``TracerProvider`` of this launcher's own."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self.provider = provider
        self._tracer = provider.get_tracer("doc_processing_std_tools")
        self._extract, self._kind = extract, SpanKind.SERVER
        self._error = Status(StatusCode.ERROR)

    @classmethod
    def to_otlp(cls, endpoint: str, service_name: str) -> Tracing:
        """Spans exported over OTLP/HTTP to *endpoint* (a collector's base URL, or its full
        ``/v1/traces`` URL), in batches. ImportError without the ``otel`` extra."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint)))
        )
        return cls(provider)

    def start(
        self,
        server: str,
        tool: str,
        meta: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
    ) -> Any:
        carrier = _trace_carrier(meta) or _trace_carrier(headers)
        parent = self._extract(carrier) if carrier else None
        return self._tracer.start_span(
            f"tools/call {tool}",
            context=parent,
            kind=self._kind,
            attributes={SPAN_SERVER: server, SPAN_TOOL: tool},
        )

    def attach(self, span: Any) -> Any:
        from opentelemetry.context import attach
        from opentelemetry.trace import set_span_in_context

        return attach(set_span_in_context(span))

    def detach(self, token: Any) -> None:
        from opentelemetry.context import detach

        detach(token)

    def context_of(self, span: Any) -> dict[str, str]:
        from opentelemetry.propagate import inject
        from opentelemetry.trace import set_span_in_context

        carrier: dict[str, str] = {}
        inject(carrier, context=set_span_in_context(span))
        return carrier

    def finish(self, span: Any, outcome: str) -> None:
        span.set_attribute(SPAN_OUTCOME, outcome)
        if outcome != Outcome.OK:
            span.set_status(self._error)
        span.end()

    def shutdown(self) -> None:
        try:
            self.provider.shutdown()
        except Exception as exc:  # an unreachable collector must not fail the launcher's exit
            log.warning("telemetry: could not send the last spans: %s", exc)


def _trace_carrier(source: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The W3C trace context in *source* (an MCP ``_meta`` or HTTP headers), or None."""
    if not source:
        return None
    parent = source.get("traceparent")
    if not isinstance(parent, str):
        return None
    carrier = {"traceparent": parent}
    state = source.get("tracestate")
    if isinstance(state, str):
        carrier["tracestate"] = state
    return carrier


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL for *endpoint*: a base URL gets ``/v1/traces``, as the
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` convention has it; a URL with a path is used as it is."""
    from urllib.parse import urlsplit

    path = urlsplit(endpoint).path
    return endpoint.rstrip("/") + "/v1/traces" if path in ("", "/") else endpoint
