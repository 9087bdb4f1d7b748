"""What serving the console (``/ui``) costs a relayed tool call when no browser is open.

Three ``dpt-launch --transport http`` daemons mount memory-tools as an external stdio server
(``command:``: every call is relayed): ``transport.console: true`` (the default), ``false``,
and a twin of the first whose spread from it is the noise to read against; all with metrics on
(the Charts' sampler reads them every 10 s). One ``mcp`` client session per daemon makes
sequential ``write_memory`` + ``read_memory`` calls in blocks, the daemons taking turns block by
block (the order reversed every other round), so all see the same machine. Reported: each
daemon's median block rate and own CPU ms per call (its child not counted; Linux), the on / off
ratio (1.0: no cost) and the twin / on ratio.

Run: ``python benchmarks/console_overhead.py [--quick]`` (run.py's ``console_overhead`` section). Machines here are shared and noisy:
read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from report import Section, print_figures  # noqa: E402  (benchmarks/ is on sys.path: see run.py)

from helpers.launch import http_launcher  # noqa: E402  (tests/ holds the helpers benchmarks share)
from helpers.processes import cpu_seconds  # noqa: E402

PY = sys.executable
CALLS_PER_BLOCK = 40
LABEL = "relayed tool over HTTP"
# The third daemon is the second's twin: the spread between twins is the noise to read against.
DAEMONS = (("console on", "true"), ("console off", "false"), ("console on, twin", "true"))
CONFIG = """\
transport: {{type: http, console: {console}}}
servers:
  memory:
    command: {py}
    args: [-m, doc_processing_std_tools.memory]
    env: {{DPTTOOLS_MEMORY_DIR: {memory}}}
"""


async def block(session: ClientSession, calls: int) -> float:
    """Seconds for *calls* sequential calls (half writes, half reads)."""
    started = time.perf_counter()
    for i in range(calls // 2):
        await session.call_tool("write_memory", {"key": f"k{i % 8}", "value": "v" * 64})
        await session.call_tool("read_memory", {"key": f"k{i % 8}"})
    return time.perf_counter() - started


async def measure(urls: dict[str, str], pids: dict[str, int], rounds: int) -> dict[str, Any]:
    rates: dict[str, list[float]] = {name: [] for name in urls}
    cpu = dict.fromkeys(urls, 0.0)
    async with contextlib.AsyncExitStack() as stack:
        sessions = {}
        for name, url in urls.items():
            read, write, *_ = await stack.enter_async_context(streamable_http_client(url))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            await block(session, 10)  # (warm: imports, first spawn paths)
            sessions[name] = session
        names = list(urls)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                before = cpu_seconds(pids[name])
                seconds = await block(sessions[name], CALLS_PER_BLOCK)
                cpu[name] += cpu_seconds(pids[name]) - before
                rates[name].append(CALLS_PER_BLOCK / seconds)
    return {
        name: {
            "calls/s": statistics.median(rates[name]),
            "cpu ms/call": 1000 * cpu[name] / (rounds * CALLS_PER_BLOCK),
        }
        for name in urls
    }


def measured(rounds: int) -> dict[str, Any]:
    """Each daemon of :data:`DAEMONS` (label -> its calls/s and CPU ms per call)."""
    with (
        tempfile.TemporaryDirectory(prefix="dpt-bench-console-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        urls, pids = {}, {}
        for i, (name, console) in enumerate(DAEMONS):
            folder = Path(tmp) / f"daemon-{i}"
            folder.mkdir()
            config = folder / "tools.yaml"
            config.write_text(CONFIG.format(console=console, py=PY, memory=folder / "memory"))
            env = {"HOME": str(folder), "FASTMCP_LOG_LEVEL": "WARNING"}
            launched = stack.enter_context(http_launcher(config, env=env))
            urls[name], pids[name] = launched.url, launched.proc.pid
        return anyio.run(measure, urls, pids, rounds)


def figures(quick: bool = False) -> dict[str, float]:
    got = measured(8 if quick else 30)
    on, off, twin = (got[name] for name, _ in DAEMONS)
    return {
        f"{LABEL}: calls/s, console on": on["calls/s"],
        f"{LABEL}: calls/s, console off": off["calls/s"],
        f"{LABEL}: dpt-launch CPU ms per call, console on": on["cpu ms/call"],
        f"{LABEL}: dpt-launch CPU ms per call, console off": off["cpu ms/call"],
        f"{LABEL}: dpt-launch CPU ms per call, console on, twin": twin["cpu ms/call"],
        f"console on / off calls/s ratio, {LABEL}": on["calls/s"] / off["calls/s"],
        f"twin / console on calls/s ratio, {LABEL} (the noise)": twin["calls/s"] / on["calls/s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    print_figures(Section("console_overhead", "this checkout", figures(quick=args.quick)))


if __name__ == "__main__":
    main()
