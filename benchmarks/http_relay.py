"""Relayed ``echo`` over streamable HTTP: dpt-launch of one or more checkouts, A/B in rounds.

Each checkout's launcher serves server-everything (from ``.bench-peers``, see
:mod:`peers`) over HTTP; the official ``mcp`` client calls ``echo`` sequentially (p50) and
from 16 concurrent callers (calls/s), the checkouts taking turns round by round so that a
busy machine slows each alike. ``--profile`` runs the (first) launcher under cProfile and
prints where its time went; ``--cpu`` prints the launcher's CPU time per call.

Run: ``python benchmarks/http_relay.py [--checkout PATH ...] [--rounds N] [--calls N]``
(default: this checkout alone). Figures are provisional on a shared machine: read the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pstats
import signal
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # tests/ holds the helpers benchmarks share
from peers import (  # noqa: E402
    CONCURRENT,
    Peer,
    Started,
    concurrent_rate,
    connected,
    echo_p50,
    free_port,
    node_servers,
)

from helpers.processes import cpu_seconds  # noqa: E402


def config(root: Path, port: int, extra: str = "") -> Path:
    path = root / f"dpt-{port}.yaml"
    everything = node_servers()["everything"]
    path.write_text(
        f"transport:\n  type: http\n  port: {port}\n{extra}"
        f"servers:\n  everything:\n    command: node\n    args: [{str(everything)!r}]\n"
    )
    return path


@contextlib.asynccontextmanager
async def launcher(
    checkout: Path, root: Path, profile: Path | None, extra: str
) -> AsyncIterator[Peer]:
    """*checkout*'s dpt-launch serving over HTTP (under cProfile if *profile*), connected."""
    port = free_port()
    python = checkout / ".venv" / "bin" / "python"
    command = [str(python)]
    if profile is not None:  # (CPU time: wall time would count the waits of each write)
        command += ["-c", PROFILED, str(profile)]
    else:
        command += ["-m", "doc_processing_std_tools.launcher.cli"]
    command.append("--config")
    command.append(str(config(root, port, extra)))
    env = {**os.environ, "HOME": str(root / "home"), "FASTMCP_LOG_LEVEL": "WARNING"}
    env["PYTHONPATH"] = str(checkout)
    (root / "home").mkdir(exist_ok=True)
    started = Started(
        command,
        f"http://127.0.0.1:{port}/mcp",
        ready=f"http://127.0.0.1:{port}/ready",
        cwd=root,
    )
    with (root / f"launcher-{port}.log").open("w") as errlog:
        async with connected(started, env, errlog) as peer:
            yield peer


PROFILED = """\
import cProfile, runpy, signal, sys, time
out = sys.argv.pop(1)
sys.argv[0] = "dpt-launch"
profiler = cProfile.Profile(time.process_time)
signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())  # (after the warm-up: no start-up)
try:
    runpy.run_module("doc_processing_std_tools.launcher.cli", run_name="__main__")
except SystemExit:
    pass
finally:
    profiler.disable()
    profiler.dump_stats(out)
"""
PARTS = (  # (label, a piece of the file's path), first match wins: self time per part
    ("uvicorn (HTTP parsing, socket writes)", "/uvicorn/"),
    ("starlette (routing, requests)", "/starlette/"),
    ("sse-starlette", "/sse_starlette/"),
    ("fastmcp HTTP guards (host/origin, auth context)", "/fastmcp/server/http"),
    ("fastmcp auth / dependencies", "/fastmcp/server/auth"),
    ("fastmcp dispatch and middleware", "/fastmcp/"),
    ("SDK session manager and HTTP transport", "/mcp/server/streamable_http"),
    ("SDK HTTP auth middleware", "/mcp/server/auth"),
    ("SDK server session and runner", "/mcp/server/"),
    ("SDK JSON-RPC dispatch (both sides)", "/mcp/shared/"),
    ("SDK client session", "/mcp/client/"),
    ("mcp_types (validation)", "/mcp_types/"),
    ("pydantic", "pydantic"),
    ("anyio (tasks, scopes, streams)", "/anyio/"),
    ("asyncio (loop, streams, child pipe writes)", "asyncio"),
    ("json", "/json/"),
    ("logging (access log)", "/logging/"),
    ("dpt transports (ASGI middleware, auth, access log)", "launcher/transports/"),
    ("dpt relay, child pipe", "launcher/external/"),
    ("dpt call rules and composition", "doc_processing_std_tools/"),
)


def print_parts(profile: Path, calls: int) -> None:
    """The launcher's CPU (self time) by part, per call, over the *calls* made after the
    warm-up (the profiler's own cost inflates each part: read the shares)."""
    stats: Any = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]  # (untyped)
    parts: dict[str, float] = {}
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.items():
        label = next((label for label, piece in PARTS if piece in filename), None)
        if label is None:
            label = "built-ins (syscalls, select)" if filename == "~" else "other"
        parts[label] = parts.get(label, 0.0) + tottime
    total = sum(parts.values())
    for label, seconds in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"{seconds / total:6.1%}  {seconds / calls * 1000:6.3f} ms/call  {label}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkout", type=Path, action="append", default=[])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument(
        "--profile", type=Path, help="cProfile the first launcher into this file; print its parts"
    )
    parser.add_argument("--config-extra", default="", help="YAML lines added to the config")
    args = parser.parse_args()
    checkouts = args.checkout or [HERE.parent]
    p50: dict[Path, list[float]] = {c: [] for c in checkouts}
    rate: dict[Path, list[float]] = {c: [] for c in checkouts}
    cpu: dict[Path, list[float]] = {c: [] for c in checkouts}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for round_ in range(args.rounds):
            for checkout in checkouts:
                profile = args.profile
                async with launcher(checkout, root, profile, args.config_extra) as peer:
                    await echo_p50(peer, 50)  # warm
                    if profile is not None:
                        os.kill(peer.pid, signal.SIGUSR1)
                    before = cpu_seconds(peer.pid)
                    p50[checkout].append(await echo_p50(peer, args.calls))
                    cpu[checkout].append((cpu_seconds(peer.pid) - before) / args.calls * 1000)
                    rate[checkout].append(await concurrent_rate(peer, args.calls // CONCURRENT))
                print(
                    f"round {round_ + 1} {checkout}: p50 {p50[checkout][-1]:.2f} ms, "
                    f"launcher CPU {cpu[checkout][-1]:.2f} ms/call, "
                    f"{rate[checkout][-1]:.0f} calls/s",
                    flush=True,
                )
                if profile is not None:
                    print_parts(profile, args.calls + args.calls // CONCURRENT * CONCURRENT)
                    return
    for checkout in checkouts:
        print(
            f"{checkout}: p50 {statistics.median(p50[checkout]):.2f} ms, "
            f"launcher CPU {statistics.median(cpu[checkout]):.2f} ms/call, "
            f"{statistics.median(rate[checkout]):.0f} calls/s (median of {args.rounds})"
        )


if __name__ == "__main__":
    anyio.run(main)
