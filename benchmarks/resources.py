"""Resources of a long-running ``dpt-launch``, and the cost of long stdio lines.

1. RSS and open descriptors of a launcher serving the shipped ``configs/tools.yaml``
   (memory-tools, filesystem, popoto-memory on its embedded redis-server) over stdio,
   after start and after 10,000 and 20,000 mixed calls (writes, reads, searches,
   listings, popoto saves and searches, bad arguments, unknown tools) through the
   official ``mcp`` client. Flat means: what one call leaves behind is bounded.
2. Time to answer one ``write_memory`` whose request line is 10 MB and 50 MB: reading
   a line must be linear in its length (the 50/10 ratio near 5, not 25).

Run: ``python benchmarks/resources.py [--quick]`` (quick: 2,000 calls, 1 and 5 MB lines).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
LAUNCHER = [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config"]

sys.path.insert(0, str(REPO / "tests"))  # tests/ holds the helpers benchmarks share
from helpers.rpc import initialize, message, receive, send  # noqa: E402


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def mixed_calls(session, workdir: Path, start: int, count: int, popoto: bool) -> None:
    """*count* calls cycling through every kind a client makes, errors included."""
    files = workdir / "fs"
    for i in range(start, start + count):
        kind = i % (10 if popoto else 8)
        if kind == 0:
            await session.call_tool("write_memory", {"key": f"k{i % 200}", "value": f"v{i}"})
        elif kind == 1:
            await session.call_tool("read_memory", {"key": f"k{i % 200}"})
        elif kind == 2:
            await session.call_tool("search_memory", {"query": f"v{i % 97}"})
        elif kind == 3:
            await session.call_tool("list_memory_keys", {})
        elif kind == 4:
            await session.call_tool(
                "write_file", {"path": str(files / f"f{i % 50}.txt"), "content": f"c{i}"}
            )
        elif kind == 5:
            await session.call_tool("read_text_file", {"path": str(files / f"f{i % 50}.txt")})
        elif kind == 6:
            await session.call_tool("read_memory", {"key": i})  # a bad argument type
        elif kind == 7:
            await session.call_tool(f"no_such_tool_{i}", {})  # an unknown tool
        elif kind == 8:
            await session.call_tool("memory_save", {"content": f"fact {i}: deploys at {i % 24}h"})
        else:
            await session.call_tool("memory_search", {"query": f"deploys {i % 24}h"})


async def bench_resources(calls: int) -> dict[str, float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    popoto = _has_popoto()
    with tempfile.TemporaryDirectory(prefix="dpt-resources-") as tmp:
        workdir = Path(tmp)
        (workdir / "fs").mkdir()
        env = {
            **os.environ,
            "FASTMCP_LOG_LEVEL": "WARNING",
            "DPTTOOLS_FS_ROOTS": str(workdir / "fs"),
            "DPTTOOLS_MEMORY_DIR": str(workdir / "mem"),
            "XDG_DATA_HOME": str(workdir / "xdg-data"),  # a private embedded store
        }
        params = StdioServerParameters(
            command=LAUNCHER[0],
            args=[*LAUNCHER[1:], str(REPO / "configs" / "tools.yaml")],
            env=env,
            cwd=str(workdir),
        )
        marks = [0, calls // 2, calls]
        out: dict[str, float] = {}
        with open(os.devnull, "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                pid = _child_pid()
                await mixed_calls(session, workdir, 0, 40, popoto)  # warm: every path once
                done = 0
                for mark in marks:
                    await mixed_calls(session, workdir, done, mark - done, popoto)
                    done = mark
                    label = f"{mark // 1000}k" if mark else "0"
                    out[f"rss MB at {label} calls"] = rss_mb(pid)
                    out[f"fds at {label} calls"] = fd_count(pid)
        first, last = (f"{m // 1000}k" if m else "0" for m in (marks[1], marks[2]))
        out[f"rss growth MB {first} -> {last} calls"] = (
            out[f"rss MB at {last} calls"] - out[f"rss MB at {first} calls"]
        )
    return out


def _has_popoto() -> bool:
    import importlib.util

    from doc_processing_std_tools.embedded_redis import find_executable

    return importlib.util.find_spec("popoto") is not None and find_executable() is not None


def _child_pid() -> int:
    """The launcher the stdio client just spawned: this process's newest python child."""
    me = os.getpid()
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            children.append(int(entry))
    if not children:
        raise RuntimeError("the launcher process was not found")
    return max(children, key=lambda pid: os.stat(f"/proc/{pid}").st_ctime)


def line_seconds(megabytes: int, workdir: Path) -> float:
    """Send one write_memory whose line is *megabytes* long; seconds until its answer."""
    config = workdir / "memory.yaml"
    config.write_text(
        f"servers:\n  memory:\n    server: memory-tools\n    settings: {{memory_dir: {workdir / 'm'}}}\n"
    )
    proc = subprocess.Popen(
        [*LAUNCHER, str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=workdir,
    )
    assert proc.stdin and proc.stdout
    initialize(proc, "bench")
    send(proc, message("notifications/initialized"))
    value = "x" * (megabytes << 20)
    call = message(
        "tools/call", {"name": "write_memory", "arguments": {"key": "big", "value": value}}, id=2
    )
    line = json.dumps(call).encode() + b"\n"  # encoded before the clock starts
    start = time.perf_counter()
    proc.stdin.write(line)
    proc.stdin.flush()
    reply = receive(proc, 2)
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait(timeout=60)
    if "result" not in reply:
        raise RuntimeError(f"write_memory of {megabytes} MB failed: {reply}")
    return elapsed


def bench_lines(sizes: tuple[int, int]) -> dict[str, float]:
    small, large = sizes
    with tempfile.TemporaryDirectory(prefix="dpt-lines-") as tmp:
        times = {
            mb: statistics.median(line_seconds(mb, Path(tmp)) for _ in range(3)) for mb in sizes
        }
    return {
        f"stdio {small} MB line answered s (median of 3)": times[small],
        f"stdio {large} MB line answered s (median of 3)": times[large],
        f"stdio {large}/{small} MB line time ratio (linear: {large // small})": times[large]
        / times[small],
    }


def figures(quick: bool = False) -> dict[str, float]:
    out = anyio.run(bench_resources, 2_000 if quick else 20_000)
    out.update(bench_lines((1, 5) if quick else (10, 50)))
    return out


if __name__ == "__main__":
    import figures_cli  # benchmarks/ is sys.path[0] when run as a script

    figures_cli.main(figures, __doc__, "2,000 calls, 1 and 5 MB lines")
