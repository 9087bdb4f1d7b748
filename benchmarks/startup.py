"""Start-up: time to the first ``tools/list`` answer, and to the first popoto call.

* the shipped ``configs/tools.yaml`` (memory-tools, filesystem, popoto-memory with its
  embedded redis-server) vs a trivial one-tool FastMCP server started the same way
  (target ratio <= 1.10), and memory-tools alone vs the same trivial server;
* spawn → first ``memory_status`` answered through the shipped config: popoto's import
  and the redis-server start run in the background, and the first popoto call waits
  for them; this shows what that first call costs.

Rounds are interleaved (trivial, memory-tools, shipped, ...) and figures are medians,
measured by ``benchmarks/run.py``'s own helpers. Run: ``python benchmarks/startup.py [--quick]``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))  # tests/ holds the helpers benchmarks share

from run import bench_first_list  # noqa: E402

from helpers.rpc import initialize_params, message, receive, send  # noqa: E402

PY = sys.executable


def first_call_seconds(command: list[str], cwd: Path, env: dict[str, str], tool: str) -> float:
    """Spawn, initialize, call *tool* at once, wait for its answer (raw JSON-RPC over pipes)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
        env=env,
    )
    assert proc.stdin and proc.stdout
    send(
        proc,
        message("initialize", initialize_params("bench"), id=1),
        message("notifications/initialized"),
        message("tools/call", {"name": tool, "arguments": {}}, id=2),
    )
    try:
        reply = receive(proc, 2)
    except EOFError:
        raise RuntimeError(f"{command} exited before answering {tool}") from None
    if reply.get("error") or reply["result"].get("isError"):
        raise RuntimeError(f"{tool} failed: {reply}")
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait(timeout=30)
    return elapsed


def figures(quick: bool = False) -> dict[str, float]:
    rounds = 3 if quick else 9
    with tempfile.TemporaryDirectory(prefix="dpt-startup-") as tmp:
        workdir = Path(tmp)
        lists = bench_first_list(rounds, workdir, None)
        env = {
            **os.environ,
            "FASTMCP_LOG_LEVEL": "WARNING",
            "DPTTOOLS_FS_ROOTS": str(workdir),
            "XDG_DATA_HOME": str(workdir / "xdg-data"),
        }
        shipped = [
            PY,
            "-m",
            "doc_processing_std_tools.launcher.cli",
            "--config",
            str(REPO / "configs" / "tools.yaml"),
        ]
        first_call = [
            first_call_seconds(shipped, workdir, env, "memory_status") for _ in range(rounds)
        ]
    return {
        "first tools/list trivial FastMCP ms": lists["trivial"],
        "first tools/list memory-tools ms": lists["launcher"],
        "first tools/list shipped config ms": lists["shipped"],
        "shipped config / trivial ratio (target <= 1.10)": lists["shipped"] / lists["trivial"],
        "memory-tools / trivial ratio (target <= 1.10)": lists["launcher"] / lists["trivial"],
        "shipped config: spawn to first memory_status ms": statistics.median(first_call) * 1000,
    }


if __name__ == "__main__":
    import figures_cli  # benchmarks/ is sys.path[0] when run as a script

    figures_cli.main(figures, __doc__, "3 rounds instead of 9")
