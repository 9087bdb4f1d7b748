"""Numbers for the people who run a launcher: Prometheus metrics and OpenTelemetry spans per tool call.

One :class:`Telemetry` per launcher (a composition), with its own prometheus
``CollectorRegistry`` and its own ``TracerProvider``: several launchers (or tests) in one
process never share a series or a span. Every path a tool call can take reports through
one :class:`CallRecord`, opened and closed by the launcher's call policy
(``launcher/calls/policy.py``), the one place every path goes through. Lock waits are reported by
:mod:`.locking`, store failures by the servers (:func:`store_failed`), both to the record of
the call they happen in (a context variable, which worker threads inherit).

The call record and the launcher's :class:`Telemetry`: :mod:`.call_record`; what a call
ended as: :mod:`.outcomes`; the Prometheus
series: :mod:`.metrics`; the spans: :mod:`.tracing`. Nothing imports prometheus_client or
opentelemetry until a launcher asks for metrics or tracing: importing the package, or a launcher
without either, pays nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .call_record import (
    CURRENT_CALL,
    CallRecord,
    Telemetry,
    lock_waited,
    note_store_fault,
    result_outcome,
    store_failed,
    traced_params,
)
from .outcomes import SPAN_OUTCOME, SPAN_SERVER, SPAN_TOOL, Outcome

if TYPE_CHECKING:
    from .metrics import CALL_BUCKETS, EXTERNAL_STATES, LOCK_BUCKETS, Metrics
    from .tracing import Tracing, traces_url

# Loaded on first use: prometheus_client takes 37 ms to import, opentelemetry's API 36 ms.
_LAZY = {
    "Metrics": "metrics",
    "CALL_BUCKETS": "metrics",
    "LOCK_BUCKETS": "metrics",
    "EXTERNAL_STATES": "metrics",
    "Tracing": "tracing",
    "traces_url": "tracing",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "CALL_BUCKETS",
    "CURRENT_CALL",
    "EXTERNAL_STATES",
    "LOCK_BUCKETS",
    "SPAN_OUTCOME",
    "SPAN_SERVER",
    "SPAN_TOOL",
    "CallRecord",
    "Metrics",
    "Outcome",
    "Telemetry",
    "Tracing",
    "lock_waited",
    "note_store_fault",
    "result_outcome",
    "store_failed",
    "traced_params",
    "traces_url",
]
