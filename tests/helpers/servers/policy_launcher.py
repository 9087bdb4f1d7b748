"""``dpt-launch`` as tests/launcher/calls/test_call_policy_paths.py watches it: the real CLI (``main()``, argv as
given), its composition's telemetry collecting metrics and keeping every finished span in memory.

A stdio launcher serves no ``/metrics``, and an HTTP launcher exports spans only in batches; so
both are read here, at once and exactly, on 127.0.0.1: ``GET /metrics`` (the registry an HTTP
launcher also serves at its own ``/metrics``) and ``GET /spans`` (one JSON object per finished
span). The port is on the first stderr line: ``policy observer on port N``.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from doc_processing_std_tools import telemetry

EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))  # (a span is kept as it ends)
TRACING = telemetry.Tracing(_PROVIDER)
METRICS = telemetry.Metrics()


class WatchedTelemetry(telemetry.Telemetry):
    """A launcher's telemetry with metrics and tracing on, into :data:`METRICS` and
    :data:`EXPORTER`."""

    def __init__(self, tracing: telemetry.Tracing | None = None) -> None:
        super().__init__(TRACING)
        self.metrics = METRICS
        self.on = True


class Observer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/metrics":
            body, content_type = METRICS.render()
        elif self.path == "/spans":
            spans = [
                {"name": span.name, **{k: str(v) for k, v in (span.attributes or {}).items()}}
                for span in EXPORTER.get_finished_spans()
            ]
            body, content_type = json.dumps(spans).encode(), "application/json"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> int:
    # (the launcher is imported below, after this: every Telemetry it makes is a watched one)
    telemetry.Telemetry = WatchedTelemetry  # type: ignore[misc]
    observer = ThreadingHTTPServer(("127.0.0.1", 0), Observer)
    threading.Thread(target=observer.serve_forever, name="policy observer", daemon=True).start()
    print(f"policy observer on port {observer.server_address[1]}", file=sys.stderr, flush=True)
    from doc_processing_std_tools.launcher.cli.main import main as launch

    return launch(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
