"""Per-call cost of a tool on an external stdio server: through ``dpt-launch`` vs directly.

memory-tools (``python -m doc_processing_std_tools.memory``) is the external server.
The same official ``mcp`` client runs sequential ``write_memory`` + ``read_memory``
calls over stdio against (a) ``dpt-launch`` mounting it with ``command:``, (b) the
server started directly and (c) the server behind ``relay_floor.py``, a relay that only
copies bytes: what any relay costs on this machine (an extra process and its wake-ups),
to read (a) against. Rounds are interleaved (alternating order) and medians are
compared; the target is a launcher / direct ratio of at least 0.90. On Linux it also reports the CPU ms
per call of the direct server, of ``dpt-launch`` itself (its child not counted) and of
the server behind it: steadier than calls/s when the machine is busy. Over stdio the
launcher relays these calls on its fast path (``launcher/fast_path.py``).

Run: ``python benchmarks/external.py [--quick]``. Machines here are shared and noisy:
read the ratio, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

PY = sys.executable
RATIO = "external stdio tool: launcher / direct calls/s ratio (target >= 0.90)"


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


async def calls_per_second(
    command: list[str], env: dict[str, str], calls: int
) -> tuple[float, float, float]:
    """Sequential calls/s of one stdio session (after warm-up calls), the CPU ms per call of
    the process the client started (its own children excluded: that is the launcher alone)
    and of that process's children (the server behind the launcher; 0 when direct)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for i in range(10):
                await session.call_tool("write_memory", {"key": f"k{i}", "value": "warm"})
            server = children(os.getpid())
            behind = [child for pid in server for child in children(pid)]
            cpu_before = sum(cpu_seconds(pid) for pid in server)
            behind_before = sum(cpu_seconds(pid) for pid in behind)
            start = time.perf_counter()
            for i in range(calls // 2):
                result = await session.call_tool(
                    "write_memory", {"key": f"k{i % 20}", "value": f"v{i}"}
                )
                assert not result.is_error, result
                result = await session.call_tool("read_memory", {"key": f"k{i % 20}"})
                assert not result.is_error, result
            rate = calls / (time.perf_counter() - start)
            cpu = sum(cpu_seconds(pid) for pid in server) - cpu_before
            behind_cpu = sum(cpu_seconds(pid) for pid in behind) - behind_before
            return rate, cpu / calls * 1000, behind_cpu / calls * 1000


async def measure(rounds: int, calls: int, workdir: Path) -> dict[str, float]:
    config = workdir / "external.yaml"
    config.write_text(  # the child inherits DPTTOOLS_MEMORY_DIR from the launcher
        f"servers:\n  memory:\n    command: {PY}\n    args: [-m, doc_processing_std_tools.memory]\n"
    )
    server = [PY, "-m", "doc_processing_std_tools.memory"]
    commands = {
        "launcher": [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)],
        "direct": server,
        "floor": [PY, str(Path(__file__).with_name("relay_floor.py")), *server],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    behind: dict[str, list[float]] = {"launcher": [], "floor": []}
    for _ in range(rounds):
        for name, command in commands.items():
            env = {
                **os.environ,
                "FASTMCP_LOG_LEVEL": "WARNING",
                "DPTTOOLS_MEMORY_DIR": str(workdir / f"mem-{name}"),
            }
            rate, cpu_ms, behind_ms = await calls_per_second(command, env, calls)
            samples[name].append(rate)
            cpu[name].append(cpu_ms)
            if name in behind:
                behind[name].append(behind_ms)
        commands = dict(reversed(commands.items()))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    medians.update({f"{name} cpu": statistics.median(values) for name, values in cpu.items()})
    medians.update({f"{name} behind cpu": statistics.median(v) for name, v in behind.items()})
    return medians


def figures(quick: bool = False) -> dict[str, float]:
    rounds, calls = (3, 200) if quick else (7, 400)
    with tempfile.TemporaryDirectory(prefix="dpt-bench-ext-") as tmp:
        rates = anyio.run(measure, rounds, calls, Path(tmp))
    return {
        "external stdio tool: direct calls/s": rates["direct"],
        "external stdio tool: through dpt-launch calls/s": rates["launcher"],
        # CPU per call is steadier than calls/s on a busy machine: what the launcher adds
        "external stdio tool: server CPU ms per call, direct": rates["direct cpu"],
        "external stdio tool: dpt-launch's own CPU ms per call": rates["launcher cpu"],
        "external stdio tool: server CPU ms per call, behind dpt-launch": rates[
            "launcher behind cpu"
        ],
        "external stdio tool: byte-copying relay's own CPU ms per call": rates["floor cpu"],
        "external stdio tool: server CPU ms per call, behind the byte-copying relay": rates[
            "floor behind cpu"
        ],
        "external stdio tool: byte-copying relay / direct calls/s ratio (the floor of any relay)": rates[
            "floor"
        ]
        / rates["direct"],
        RATIO: rates["launcher"] / rates["direct"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    for name, value in figures(quick=args.quick).items():
        shown = (
            f"{value:.2f}x"
            if "ratio" in name
            else f"{value:.2f}"
            if "ms" in name
            else f"{value:.0f}"
        )
        print(f"  {name:<72} {shown}")


if __name__ == "__main__":
    main()
