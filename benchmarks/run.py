"""Speed figures, side by side in one run: interleaved rounds, medians, ratios.

1. ``import doc_processing_std_tools`` (target: at most 30 ms over a bare interpreter).
2. Time to the first ``tools/list`` answer: ``dpt-launch`` (memory-tools mounted) vs a
   trivial one-tool FastMCP server started the same way (target ratio <= 1.10), plus
   the shipped ``configs/tools.yaml`` (all three servers, embedded redis-server).
3. ``write_memory`` + ``read_memory`` calls/s through ``dpt-launch`` vs memory-tools
   run alone (``python -m doc_processing_std_tools.memory``) (target ratio >= 0.90), and
   the same with memory-tools mounted as an external stdio server (``command:``) vs a
   direct connection to it (target ratio >= 0.90).
4. ``search_memory`` over 10,000 keys vs ``grep -rFil`` on the same folder.
5. popoto-memory figures (``benchmarks/popoto_bench.py``) when the extra is installed.

Run: ``python benchmarks/run.py [--quick]``. Machines here are shared and noisy:
read ratios, not absolute numbers, and rerun before believing a regression.
"""

from __future__ import annotations

import argparse
import importlib.util
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

TRIVIAL_SERVER = """
from fastmcp import FastMCP
mcp = FastMCP("trivial")
@mcp.tool
def echo(text: str) -> str:
    return text
mcp.run(show_banner=False)
"""


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def print_row(label: str, value: str) -> None:
    print(f"  {label:<58} {value}")


# -- 1. import cost -----------------------------------------------------------------


def bench_import(rounds: int) -> dict[str, float]:
    base: list[float] = []
    ours: list[float] = []
    for _ in range(rounds):
        for code, out in (("pass", base), ("import doc_processing_std_tools", ours)):
            start = time.perf_counter()
            subprocess.run([PY, "-c", code], check=True)
            out.append(time.perf_counter() - start)
    return {"bare_ms": median_ms(base), "import_ms": median_ms(ours)}


# -- 2. time to first tools/list ------------------------------------------------------


def first_list_seconds(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Spawn, initialize, send tools/list, wait for its answer (raw JSON-RPC over pipes)."""
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
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    ]
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{command} exited before answering tools/list")
        if json.loads(line).get("id") == 2:
            break
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait(timeout=30)
    return elapsed


def bench_first_list(rounds: int, workdir: Path, redis_url: str | None) -> dict[str, float]:
    trivial = workdir / "trivial_server.py"
    trivial.write_text(TRIVIAL_SERVER)
    memory_only = workdir / "memory-only.yaml"
    memory_only.write_text(
        f"servers:\n  memory:\n    server: memory-tools\n    settings: {{memory_dir: {workdir / 'mem-start'}}}\n"
    )
    env = {
        **os.environ,
        "FASTMCP_LOG_LEVEL": "WARNING",
        "DPTTOOLS_FS_ROOTS": str(workdir),
        "XDG_DATA_HOME": str(workdir / "xdg-data"),  # a private store, not the user's
    }
    launcher = [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config"]
    commands = {
        "trivial": [PY, str(trivial)],
        "launcher": [*launcher, str(memory_only)],
        "shipped": [*launcher, str(REPO / "configs" / "tools.yaml")],
    }
    if redis_url:  # popoto-memory alone: on a running Redis vs starting its own (embedded)
        for backend, extra in (
            ("redis", f"url: {redis_url}"),
            ("embedded", f"data_dir: {workdir / 'emb'}"),
        ):
            config = workdir / f"popoto-{backend}.yaml"
            config.write_text(
                f"servers:\n  popoto-memory:\n    settings:\n      backend: {backend}\n"
                f"      agent_id: bench\n      {extra}\n"
            )
            commands[f"popoto-{backend}"] = [*launcher, str(config)]
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            samples[name].append(first_list_seconds(command, workdir, env))
    return {name: median_ms(values) for name, values in samples.items()}


# -- 3. calls per second -----------------------------------------------------------------


async def calls_per_second(
    command: list[str], env: dict[str, str], calls: int, rounds: int
) -> list[float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    rates = []
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.call_tool("write_memory", {"key": "warm", "value": "up"})
            for _ in range(rounds):
                start = time.perf_counter()
                for i in range(calls // 2):
                    await session.call_tool("write_memory", {"key": f"k{i % 20}", "value": f"v{i}"})
                    await session.call_tool("read_memory", {"key": f"k{i % 20}"})
                rates.append(calls / (time.perf_counter() - start))
    return rates


async def bench_calls(
    rounds: int, calls: int, workdir: Path, *, external: bool = False
) -> dict[str, float]:
    """memory-tools through dpt-launch (in-process, or as an external stdio server) vs alone."""
    config = workdir / ("calls-external.yaml" if external else "calls.yaml")
    if external:  # the child inherits DPTTOOLS_MEMORY_DIR from the launcher's environment
        config.write_text(
            f"servers:\n  memory:\n    command: {PY}\n    args: [-m, doc_processing_std_tools.memory]\n"
        )
    else:
        config.write_text(
            f"servers:\n  memory:\n    server: memory-tools\n    settings: {{memory_dir: {workdir / 'mem-l'}}}\n"
        )
    commands = {
        "launcher": [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)],
        "alone": [PY, "-m", "doc_processing_std_tools.memory"],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):  # interleaved: each round runs both, in alternating order
        for name, command in commands.items():
            env = {**os.environ, "DPTTOOLS_MEMORY_DIR": str(workdir / f"mem-{name}")}
            samples[name].extend(await calls_per_second(command, env, calls, 1))
        commands = dict(reversed(commands.items()))
    return {name: statistics.median(values) for name, values in samples.items()}


# -- 4. search over 10,000 keys vs grep ---------------------------------------------------


def bench_search(keys: int, rounds: int, workdir: Path) -> dict[str, float]:
    from doc_processing_std_tools.memory import MemoryStore

    folder = workdir / "mem-search"
    store = MemoryStore(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(keys):  # written directly: the write path is not what is measured here
        value = f"note {i} about project {i % 97}" + (" NEEDLE" if i % 1000 == 0 else "")
        (folder / f"key-{i}.json").write_text(json.dumps({"key": f"key-{i}", "value": value}))
    ours: list[float] = []
    grep: list[float] = []
    found = 0
    for _ in range(rounds):
        start = time.perf_counter()
        found = len(json.loads(store.search("needle")))
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        out = subprocess.run(
            ["grep", "-rFil", "needle", str(folder)], capture_output=True, text=True
        )
        grep.append(time.perf_counter() - start)
        assert len(out.stdout.splitlines()) == found, (found, out.stdout)
    return {"search_ms": median_ms(ours), "grep_ms": median_ms(grep), "matches": found}


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--skip-popoto", action="store_true")
    args = parser.parse_args()
    rounds = 3 if args.quick else 9
    has_popoto = importlib.util.find_spec("popoto") is not None

    with tempfile.TemporaryDirectory(prefix="dpt-bench-") as tmp:
        workdir = Path(tmp)
        print("1. import cost (median of fresh interpreters)")
        imp = bench_import(rounds * 2)
        print_row("python -c pass", f"{imp['bare_ms']:.1f} ms")
        print_row("python -c 'import doc_processing_std_tools'", f"{imp['import_ms']:.1f} ms")
        print_row(
            "import cost (difference; target <= 30 ms)",
            f"{imp['import_ms'] - imp['bare_ms']:.1f} ms",
        )

        print("2. spawn -> initialize -> first tools/list answer (median)")
        redis_proc = None
        redis_url = None
        if has_popoto and not args.skip_popoto:
            sys.path.insert(0, str(HERE))
            from popoto_bench import start_test_redis

            redis_proc, port = start_test_redis(workdir)
            redis_url = f"redis://127.0.0.1:{port}/1"
        try:
            first = bench_first_list(rounds, workdir, redis_url)
        finally:
            if redis_proc is not None:
                redis_proc.terminate()
                redis_proc.wait(timeout=10)
        print_row("trivial one-tool FastMCP server", f"{first['trivial']:.0f} ms")
        print_row("dpt-launch, memory-tools mounted", f"{first['launcher']:.0f} ms")
        print_row(
            "dpt-launch, configs/tools.yaml (3 servers, embedded redis)",
            f"{first['shipped']:.0f} ms",
        )
        print_row(
            "ratio launcher / trivial (target <= 1.10)",
            f"{first['launcher'] / first['trivial']:.2f}x",
        )
        print_row("ratio shipped config / trivial", f"{first['shipped'] / first['trivial']:.2f}x")
        if redis_url:
            print_row(
                "dpt-launch, popoto-memory on a running redis", f"{first['popoto-redis']:.0f} ms"
            )
            print_row(
                "dpt-launch, popoto-memory embedded (starts redis)",
                f"{first['popoto-embedded']:.0f} ms",
            )
            print_row(
                "embedded - running (the cost of starting redis-server)",
                f"{first['popoto-embedded'] - first['popoto-redis']:+.0f} ms",
            )

        print("3. write_memory+read_memory over stdio, sequential (median calls/s)")
        calls = anyio.run(bench_calls, rounds, 200 if args.quick else 400, workdir)
        print_row(
            "memory-tools alone (python -m doc_processing_std_tools.memory)",
            f"{calls['alone']:.0f} calls/s",
        )
        print_row("through dpt-launch", f"{calls['launcher']:.0f} calls/s")
        print_row(
            "ratio launcher / alone (target >= 0.90)", f"{calls['launcher'] / calls['alone']:.2f}x"
        )
        ext = anyio.run(
            lambda: bench_calls(rounds, 200 if args.quick else 400, workdir, external=True)
        )
        print_row("memory-tools as an external stdio server (command:)", "")
        print_row("  connected directly", f"{ext['alone']:.0f} calls/s")
        print_row("  through dpt-launch (proxied)", f"{ext['launcher']:.0f} calls/s")
        print_row(
            "  ratio launcher / direct (target >= 0.90)",
            f"{ext['launcher'] / ext['alone']:.2f}x",
        )

        print("4. search_memory over 10,000 keys vs grep -rFil (median)")
        search = bench_search(10_000, rounds, workdir)
        print_row(f"search_memory ({search['matches']} matches)", f"{search['search_ms']:.0f} ms")
        print_row("grep -rFil on the same folder", f"{search['grep_ms']:.0f} ms")
        print_row("ratio search_memory / grep", f"{search['search_ms'] / search['grep_ms']:.2f}x")

    if args.skip_popoto:
        return
    if not has_popoto:
        print("5. popoto-memory: skipped (pip install '.[popoto]')")
        return
    print("5. popoto-memory")
    import popoto_bench

    popoto_bench.main()


if __name__ == "__main__":
    main()
