"""What metrics and tracing cost per tool call: the same launcher with telemetry on and off.

Two comparisons, each side by side (``side_by_side.py``: every launcher open at once, blocks
of sequential ``write_memory`` + ``read_memory`` calls in turn, medians):

* **HTTP, memory-tools in-process** (fastmcp's path): ``telemetry: {metrics: false}`` against
  the default metrics plus ``otlp_endpoint`` (spans exported in batches to a collector on
  127.0.0.1 that answers every POST and keeps nothing).
* **stdio, memory-tools as a ``command:`` server** (the fast path, where the launcher's own
  cost per call is smallest, so any overhead shows most): no telemetry against
  ``otlp_endpoint``. (Over stdio there is no ``/metrics`` to scrape, so no metrics are kept.)

It prints calls/s and the launcher's own CPU ms per call (read from ``/proc``, steadier than
calls/s on a busy machine) for each, and the on / off ratios.

Run: ``python benchmarks/telemetry.py [--quick]``. Needs the ``otel`` extra.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
from side_by_side import WARM_CALLS, Measured, _blocks, side_by_side

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers.launch import http_launcher

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
    servers = {}
    for name, setting in {"off": "", "on": f"telemetry: {{otlp_endpoint: '{endpoint}'}}\n"}.items():
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
        command = [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)]
        servers[name] = (command, env)
    return anyio.run(side_by_side, servers, blocks, CALLS_PER_BLOCK)


def figures(quick: bool = False) -> dict[str, float]:
    blocks = 10 if quick else 40
    with tempfile.TemporaryDirectory(prefix="dpt-bench-telemetry-") as tmp, collector() as endpoint:
        http = measure_http(blocks, Path(tmp), endpoint)
        stdio = measure_stdio(blocks, Path(tmp), endpoint)
    found: dict[str, float] = {}
    for label, got in (("HTTP, in-process tool", http), ("stdio fast path, relayed tool", stdio)):
        off, on = got["off"], got["on"]
        found[f"{label}: calls/s, telemetry off"] = off.rate
        found[f"{label}: calls/s, telemetry on"] = on.rate
        found[f"{label}: dpt-launch CPU ms per call, off"] = off.cpu_ms
        found[f"{label}: dpt-launch CPU ms per call, on"] = on.cpu_ms
        found[f"{label}: telemetry's CPU us per call (on - off)"] = (on.cpu_ms - off.cpu_ms) * 1000
    found[HTTP_RATIO] = http["on"].rate / http["off"].rate
    found[STDIO_RATIO] = stdio["on"].rate / stdio["off"].rate
    found["telemetry on / off CPU per call ratio, HTTP"] = http["on"].cpu_ms / http["off"].cpu_ms
    found["tracing on / off CPU per call ratio, stdio"] = stdio["on"].cpu_ms / stdio["off"].cpu_ms
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    for name, value in figures(quick=args.quick).items():
        shown = (
            f"{value:.3f}x"
            if "ratio" in name
            else f"{value:.0f}"
            if "us" in name or "calls/s" in name
            else f"{value:.3f}"
        )
        print(f"  {name:<66} {shown}")


if __name__ == "__main__":
    main()
