"""Start-up: time to the first ``tools/list`` answer, and to the first popoto call.

* the shipped ``configs/tools.yaml`` (memory-tools, filesystem, popoto-memory with its
  embedded redis-server) vs a trivial one-tool FastMCP server started the same way
  (target ratio <= 1.10), and memory-tools alone vs the same trivial server;
* spawn → first ``memory_status`` answered through the shipped config: popoto's import
  and the redis-server start run in the background, and the first popoto call waits
  for them; this shows what that first call costs;
* three external stdio servers (the npm reference servers: server-everything and two
  server-filesystem): spawn → the first ``tools/list`` holding all three's tools through
  ``dpt-launch``, against the three started directly in parallel, each sent ``initialize`` and
  ``tools/list`` at once, until the last answers (target ratio <= 1.30). Skipped without node
  or ``npm ci`` in tests/helpers/reference_servers;
* the floor: the CPU time of importing, in a fresh interpreter, what any server on the SDK and
  fastmcp pays before its first answer (``FLOOR``), and how it compares with the three external
  servers' whole start.

Rounds are interleaved (trivial, memory-tools, shipped, ...) and figures are medians,
measured by ``benchmarks/run.py``'s own helpers; besides, the worst round's ratio (the target
holds in every run, not on average) and the CPU time each server had used by its answer (Linux:
it holds on a shared machine, where the wall time follows the load).
Run: ``python benchmarks/startup.py [--quick]``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
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

from run import bench_first_list, finish, spawn_asking  # noqa: E402

from helpers.rpc import message, receive, send  # noqa: E402

PY = sys.executable
REFERENCE = (
    REPO / "tests" / "helpers" / "reference_servers" / "node_modules" / "@modelcontextprotocol"
)
EXTERNAL = {  # namespace -> the server's script and its arguments (a folder: the workdir)
    "ev": (REFERENCE / "server-everything" / "dist" / "index.js", []),
    "fs": (REFERENCE / "server-filesystem" / "dist" / "index.js", ["."]),
    "fs2": (REFERENCE / "server-filesystem" / "dist" / "index.js", ["."]),
}


DIRECT = "first complete tools/list, 3 external servers started directly in parallel ms"


def external_missing() -> str | None:
    """Why the three external servers cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not all(script.is_file() for script, _ in EXTERNAL.values()):
        return "run `npm ci` in tests/helpers/reference_servers"
    return None


def reply_to(proc: subprocess.Popen[bytes], id: int) -> dict:
    """The reply to request *id*; a request of the server's (roots/list) gets an empty answer."""
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise EOFError(f"the server closed stdout before answering request {id}")
        got = json.loads(line)
        if "method" in got and "id" in got:
            send(proc, {"jsonrpc": "2.0", "id": got["id"], "result": {"roots": []}})
        elif got.get("id") == id:
            return got


def direct_parallel_seconds(workdir: Path, env: dict[str, str]) -> float:
    """Spawn the three servers at once, each sent initialize and tools/list; until the last list."""
    start = time.perf_counter()
    listing = message("tools/list", {}, id=2)
    procs = [
        spawn_asking(["node", str(script), *args], workdir, env, listing)
        for script, args in EXTERNAL.values()
    ]
    for proc in procs:
        reply_to(proc, 2)
    elapsed = time.perf_counter() - start
    for proc in procs:
        finish(proc)
    return elapsed


def launcher_complete_list_seconds(config: Path, workdir: Path, env: dict[str, str]) -> float:
    """Spawn dpt-launch, initialize, list until the list holds every external server's tools."""
    start = time.perf_counter()
    command = [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)]
    proc = spawn_asking(command, workdir, env, message("tools/list", {}, id=2))
    request = 2
    while True:
        names = {tool["name"] for tool in reply_to(proc, request)["result"]["tools"]}
        if all(any(name.startswith(f"{space}_") for name in names) for space in EXTERNAL):
            break
        request += 1
        time.sleep(0.01)
        send(proc, message("tools/list", {}, id=request))
    elapsed = time.perf_counter() - start
    finish(proc)
    return elapsed


def external_figures(rounds: int, workdir: Path, env: dict[str, str]) -> dict[str, float]:
    """Three external servers: the launcher's first complete list against the direct floor."""
    config = workdir / "three-external.yaml"
    entries = "".join(
        f"  {space}:\n    command: node\n    args: {json.dumps([str(script), *args])}\n"
        f"    namespace: {space}\n"
        for space, (script, args) in EXTERNAL.items()
    )
    config.write_text("servers:\n" + entries)
    direct, launcher = [], []
    for _ in range(rounds):  # interleaved
        direct.append(direct_parallel_seconds(workdir, env))
        launcher.append(launcher_complete_list_seconds(config, workdir, env))
    floor, ours = statistics.median(direct), statistics.median(launcher)
    return {
        DIRECT: floor * 1000,
        "first complete tools/list, 3 external servers through dpt-launch ms": ours * 1000,
        "3 external servers: launcher / direct in parallel ratio (target <= 1.30)": ours / floor,
    }


# What any server pays before its first answer: each step imported in a fresh interpreter.
FLOOR = {
    "python -c pass": "pass",
    "import mcp (the SDK)": "import mcp",
    "from fastmcp import FastMCP": "from fastmcp import FastMCP",
    "+ the session-state store a first tools/list builds": (
        "from fastmcp import FastMCP\n"
        "from key_value.aio.adapters.pydantic import PydanticAdapter\n"
        "from key_value.aio.stores.memory import MemoryStore"
    ),
    "+ import fastmcp.client": "from fastmcp import FastMCP\nimport fastmcp.client",
}


def floor_cpu_ms(rounds: int, env: dict[str, str]) -> dict[str, float]:
    """Median CPU ms of each ``FLOOR`` step in a fresh interpreter, the steps interleaved.

    CPU time, not wall time: on a shared machine it holds where the wall time follows the load."""
    samples: dict[str, list[float]] = {name: [] for name in FLOOR}
    for _ in range(rounds):
        for name, code in FLOOR.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([PY, "-c", code], env=env, check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            samples[name].append(used * 1000)
    return {name: statistics.median(values) for name, values in samples.items()}


def first_call_seconds(command: list[str], cwd: Path, env: dict[str, str], tool: str) -> float:
    """Spawn, initialize, call *tool* at once, wait for its answer (raw JSON-RPC over pipes)."""
    start = time.perf_counter()
    proc = spawn_asking(
        command, cwd, env, message("tools/call", {"name": tool, "arguments": {}}, id=2)
    )
    assert proc.stdin and proc.stdout
    try:
        reply = receive(proc, 2)
    except EOFError:
        raise RuntimeError(f"{command} exited before answering {tool}") from None
    if reply.get("error") or reply["result"].get("isError"):
        raise RuntimeError(f"{tool} failed: {reply}")
    elapsed = time.perf_counter() - start
    finish(proc)
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
        external = {} if external_missing() else external_figures(rounds, workdir, env)
        floor = floor_cpu_ms(rounds, env)
    direct = external.get(DIRECT)
    return {
        **external,
        **{f"floor: {name} CPU ms": value for name, value in floor.items()},
        **(
            {
                "floor: import mcp CPU / 3 external servers direct ratio": floor[
                    "import mcp (the SDK)"
                ]
                / direct,
                "floor: fastmcp server and client CPU / 3 external servers direct ratio": floor[
                    "+ import fastmcp.client"
                ]
                / direct,
            }
            if direct
            else {}
        ),
        "first tools/list trivial FastMCP ms": lists["trivial"],
        "first tools/list memory-tools ms": lists["launcher"],
        "first tools/list shipped config ms": lists["shipped"],
        "shipped config / trivial ratio (target <= 1.10)": lists["shipped"] / lists["trivial"],
        "memory-tools / trivial ratio (target <= 1.10)": lists["launcher"] / lists["trivial"],
        "shipped config / trivial, the worst round's ratio": lists["worst shipped"],
        "first tools/list CPU trivial FastMCP ms": lists["cpu trivial"],
        "first tools/list CPU shipped config ms": lists["cpu shipped"],
        "shipped config / trivial CPU-time ratio": lists["cpu shipped"] / lists["cpu trivial"],
        "shipped config: spawn to first memory_status ms": statistics.median(first_call) * 1000,
    }


if __name__ == "__main__":
    import figures_cli  # benchmarks/ is sys.path[0] when run as a script

    figures_cli.main(figures, __doc__, "3 rounds instead of 9")
