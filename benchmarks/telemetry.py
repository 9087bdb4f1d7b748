"""What metrics and tracing cost per tool call: the same launcher with telemetry on and off.

Two comparisons, each side by side (``side_by_side.py``: every launcher open at once, blocks
of sequential ``write_memory`` + ``read_memory`` calls in turn, medians):

* **HTTP, memory-tools in-process** (fastmcp's path): ``telemetry: {metrics: false}`` against
  the default metrics plus ``otlp_endpoint`` (spans exported in batches to a collector on
  127.0.0.1 that answers every POST and keeps nothing).
* **stdio, memory-tools as a ``command:`` server** (the fast path, where the launcher's own
  cost per call is smallest, so any overhead shows most): no telemetry against
  ``otlp_endpoint``, and a third launcher with ``otlp_endpoint`` whose spans are made but not
  sampled (``OTEL_TRACES_SAMPLER=always_off``): what making a span costs without exporting
  it. (Over stdio there is no ``/metrics`` to scrape, so no metrics are kept.)

It prints calls/s and the launcher's own CPU ms per call (read from ``/proc``, steadier than
calls/s on a busy machine) for each, and the on / off ratios.

Then the parts in isolation, in this process (a loop of ``Telemetry.begin`` / ``enter`` /
``end`` as the call path runs them, no event loop, no I/O; process CPU per call, minus the same
loop with telemetry off): a call's metrics; a span made and ended by the SDK with no exporter;
a span not sampled; a span exported over OTLP/HTTP to the collector (the batch processor's
thread, encoding and sending included, flushed before the clock stops).

Run: ``python benchmarks/telemetry.py [--quick]``. Needs the ``otel`` extra.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
from side_by_side import WARM_CALLS, Measured, _blocks, side_by_side

from doc_processing_std_tools.telemetry import Telemetry, Tracing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from launch_helpers import http_launcher

PY = sys.executable
CALLS_PER_BLOCK = 40
HTTP_RATIO = "telemetry on / off calls/s ratio, HTTP, in-process tool"
STDIO_RATIO = "tracing on / off calls/s ratio, stdio fast path, relayed tool"


@contextmanager
def collector() -> Iterator[str]:
    """An OTLP/HTTP collector that accepts every export and keeps nothing: its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


async def http_sessions(
    urls: dict[str, str], pids: dict[str, list[int]], blocks: int
) -> dict[str, Measured]:
    """Sequential calls over streamable HTTP to each launcher at *urls*, in blocks, in turn."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with AsyncExitStack() as stack:
        sessions = {}
        for name, url in urls.items():
            read, write, *_ = await stack.enter_async_context(streamable_http_client(url))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            for i in range(WARM_CALLS):
                await session.call_tool("write_memory", {"key": f"k{i}", "value": "warm"})
            sessions[name] = session
        return await _blocks(sessions, pids, blocks, CALLS_PER_BLOCK)


def measure_http(blocks: int, workdir: Path, endpoint: str) -> dict[str, Measured]:
    telemetry = {
        "off": "telemetry: {metrics: false}",
        "on": f"telemetry: {{otlp_endpoint: '{endpoint}'}}",
    }
    with ExitStack() as stack:
        urls, pids = {}, {}
        for name, setting in telemetry.items():
            folder = workdir / f"http-{name}"
            folder.mkdir()
            config = folder / "tools.yaml"
            config.write_text(
                f"transport: http\n{setting}\nservers:\n  memory:\n    server: memory-tools\n"
                f"    settings: {{memory_dir: {folder / 'mem'}}}\n"
            )
            launched = stack.enter_context(http_launcher(config, cwd=folder))
            urls[name], pids[name] = launched.url, [launched.proc.pid]
        return anyio.run(http_sessions, urls, pids, blocks)


def measure_stdio(blocks: int, workdir: Path, endpoint: str) -> dict[str, Measured]:
    traced = f"telemetry: {{otlp_endpoint: '{endpoint}'}}\n"
    servers = {}
    for name, setting, sampler in (
        ("off", "", None),
        ("unsampled", traced, "always_off"),
        ("on", traced, None),
    ):
        config = workdir / f"stdio-{name}.yaml"
        config.write_text(  # the child inherits DPTTOOLS_MEMORY_DIR from the launcher
            f"{setting}servers:\n  memory:\n    command: {PY}\n"
            "    args: [-m, doc_processing_std_tools.memory]\n"
        )
        env = {
            **os.environ,
            "FASTMCP_LOG_LEVEL": "WARNING",
            "DPTTOOLS_MEMORY_DIR": str(workdir / f"mem-{name}"),
        }
        env.pop("OTEL_TRACES_SAMPLER", None)
        if sampler:
            env["OTEL_TRACES_SAMPLER"] = sampler
        command = [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)]
        servers[name] = (command, env)
    return anyio.run(side_by_side, servers, blocks, CALLS_PER_BLOCK)


def call_cpu_us(telemetry: Telemetry, calls: int) -> float:
    """Process CPU µs per call of the call path's telemetry steps, *calls* times."""
    start = time.process_time()
    for _ in range(calls):
        record = telemetry.begin("memory", "write_memory")
        record.enter()
        record.end("ok")
    if telemetry.tracing is not None:
        telemetry.tracing.provider.force_flush()  # the exporter's work counts
    return (time.process_time() - start) / calls * 1e6


def isolated(calls: int, endpoint: str) -> dict[str, float]:
    """CPU µs per call of each part of telemetry, each minus the same loop with it off; the
    median of 5 rounds, the parts interleaved."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    metrics = Telemetry()
    metrics.enable_metrics()
    parts = {
        "off": Telemetry(),
        "metrics": metrics,
        "span, no exporter": Telemetry(Tracing(TracerProvider())),
        "span, not sampled": Telemetry(Tracing(TracerProvider(sampler=ALWAYS_OFF))),
        "span, exported over OTLP/HTTP": Telemetry(Tracing.to_otlp(endpoint, "bench")),
    }
    rounds: dict[str, list[float]] = {name: [] for name in parts}
    for telemetry in parts.values():
        call_cpu_us(telemetry, calls // 10)  # warm-up
    for _ in range(5):
        for name, telemetry in parts.items():
            rounds[name].append(call_cpu_us(telemetry, calls))
    for telemetry in parts.values():
        telemetry.shutdown()
    cost = {name: statistics.median(values) for name, values in rounds.items()}
    return {
        f"in isolation: {name}, CPU us per call": cost[name] - cost["off"]
        for name in parts
        if name != "off"
    }


def figures(quick: bool = False) -> dict[str, float]:
    blocks = 10 if quick else 40
    with tempfile.TemporaryDirectory(prefix="dpt-bench-telemetry-") as tmp, collector() as endpoint:
        http = measure_http(blocks, Path(tmp), endpoint)
        stdio = measure_stdio(blocks, Path(tmp), endpoint)
        alone = isolated(2_000 if quick else 20_000, endpoint)
    found: dict[str, float] = {}
    for label, got in (("HTTP, in-process tool", http), ("stdio fast path, relayed tool", stdio)):
        off, on = got["off"], got["on"]
        found[f"{label}: calls/s, telemetry off"] = off.rate
        found[f"{label}: calls/s, telemetry on"] = on.rate
        found[f"{label}: dpt-launch CPU ms per call, off"] = off.cpu_ms
        found[f"{label}: dpt-launch CPU ms per call, on"] = on.cpu_ms
        found[f"{label}: telemetry's CPU us per call (on - off)"] = (on.cpu_ms - off.cpu_ms) * 1000
    unsampled = stdio["unsampled"]
    found["stdio fast path, relayed tool: calls/s, spans not sampled (always_off)"] = unsampled.rate
    found["stdio fast path, relayed tool: dpt-launch CPU ms per call, spans not sampled"] = (
        unsampled.cpu_ms
    )
    found[HTTP_RATIO] = http["on"].rate / http["off"].rate
    found[STDIO_RATIO] = stdio["on"].rate / stdio["off"].rate
    found["telemetry on / off CPU per call ratio, HTTP"] = http["on"].cpu_ms / http["off"].cpu_ms
    found["tracing on / off CPU per call ratio, stdio"] = stdio["on"].cpu_ms / stdio["off"].cpu_ms
    return found | alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    for name, value in figures(quick=args.quick).items():
        shown = (
            f"{value:.3f}x"
            if "ratio" in name
            else f"{value:.1f}"
            if "us" in name or "calls/s" in name
            else f"{value:.3f}"
        )
        print(f"  {name:<66} {shown}")


if __name__ == "__main__":
    main()
