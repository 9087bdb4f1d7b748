"""One OpenTelemetry span per tool call, from a ``TracerProvider`` of the launcher's own."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.context import attach, detach
from opentelemetry.propagate import extract, inject
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from .outcomes import SPAN_OUTCOME, SPAN_SERVER, SPAN_TOOL, Outcome

log = logging.getLogger("dpt-launch")


class Tracing:
    """One span per tool call, from a ``TracerProvider`` of this launcher's own."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("doc_processing_std_tools")
        self._extract, self._kind = extract, SpanKind.SERVER
        self._error = Status(StatusCode.ERROR)

    @classmethod
    def to_otlp(cls, endpoint: str, service_name: str) -> Tracing:
        """Spans exported over OTLP/HTTP to *endpoint* (a collector's base URL, or its full
        ``/v1/traces`` URL), in batches. ImportError without the ``otel`` extra."""
        # (here, not at the top: the otel extra, optional, and 0.21 s to import)
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
        return attach(set_span_in_context(span))

    def detach(self, token: Any) -> None:
        detach(token)

    def context_of(self, span: Any) -> dict[str, str]:
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
    path = urlsplit(endpoint).path
    return endpoint.rstrip("/") + "/v1/traces" if path in ("", "/") else endpoint
