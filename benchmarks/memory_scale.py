"""memory-tools at scale, side by side in one run (issue 12).

1. ``search_memory`` through ``dpt-launch`` (over MCP, as a client calls it) vs ``grep -rFil``
   on the same folder, at 10,000 and 100,000 keys (``--quick`` skips 100,000): cold (a
   launcher's first call with no saved index), warm (later calls), and, for reference, cold
   over an index saved by an earlier launcher (``--quick``: one round at 100,000). Target:
   <= 1.0x grep, cold and warm.
2. ``write_memory`` of 1, 4 and 16 MB through ``dpt-launch`` vs ``python -m
   doc_processing_std_tools.memory`` alone. Target: launcher speed >= 0.90x alone at 16 MB, and
   time linear in size.
3. Peak RSS of a fresh process running ``list_memory_keys`` and ``search_memory`` with a 1 GB
   (sparse) entry in the folder. Target: < 200 MB.

Run: ``python benchmarks/memory_scale.py [--quick]``. Shared machines are noisy: read the
ratios (each measured interleaved with its reference), not the absolute times.
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
from side_by_side import open_sessions  # (benchmarks/ is on sys.path: see run.py)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the shared helpers
from memory_helpers import list_and_search_peak, write_entry, write_sparse

PY = sys.executable
NEEDLE_EVERY = 1000  # one key in this many holds the needle
SETTLE_SECONDS = 2.2  # files younger than memory.RACY_NS are re-read on every call


def make_folder(folder: Path, keys: int) -> int:
    """*keys* entries written directly (the write path is not measured here); matches."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(keys):
        value = f"note {i} about project {i % 97}" + (" NEEDLE" if i % NEEDLE_EVERY == 0 else "")
        write_entry(folder, f"key-{i}", value)
    return len(range(0, keys, NEEDLE_EVERY))


def grep_seconds(folder: Path, expected: int) -> float:
    start = time.perf_counter()
    out = subprocess.run(["grep", "-rFil", "needle", str(folder)], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    assert len(out.stdout.splitlines()) == expected, out.stdout[:200]
    return elapsed


def launcher_config(workdir: Path, folder: Path) -> Path:
    config = workdir / f"{folder.name}.yaml"
    config.write_text(
        f"servers:\n  memory:\n    server: memory-tools\n    settings: {{memory_dir: {folder}}}\n"
    )
    return config


async def session_calls(
    command: list[str], env: dict[str, str], calls: list[tuple[str, dict]]
) -> list[tuple[float, str]]:
    """Start a server over stdio, then time each call (seconds, text); the start is not timed."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    results = []
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.list_tools()  # as clients do first (the SDK caches output schemas)
            for tool, args in calls:
                start = time.perf_counter()
                result = await session.call_tool(tool, args)
                elapsed = time.perf_counter() - start
                text = "".join(getattr(block, "text", "") for block in result.content)
                assert not result.is_error, text[:300]
                results.append((elapsed, text))
    return results


def launch_command(config: Path) -> list[str]:
    return [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)]


def bench_search(keys: int, rounds: int, workdir: Path) -> dict[str, float]:
    """``search_memory`` as a client calls it (over MCP, in a ``dpt-launch`` subprocess).

    Each round starts a launcher with an empty index cache (``XDG_CACHE_HOME``, where
    ``memory.index._index_dir`` saves indexes): its first search is cold, with no saved
    index; the next three are warm. A second launcher then starts over the index the first
    saved at exit (cold with a saved index, for reference). grep runs interleaved.
    """
    folder = workdir / f"mem-{keys}"
    expected = make_folder(folder, keys)
    time.sleep(SETTLE_SECONDS)
    config = launcher_config(workdir, folder)
    search = ("search_memory", {"query": "needle"})

    def run(calls: int, cache: Path) -> list[float]:
        env = {**os.environ, "XDG_CACHE_HOME": str(cache), "FASTMCP_LOG_LEVEL": "WARNING"}
        done = anyio.run(session_calls, launch_command(config), env, [search] * calls)
        for _elapsed, text in done:
            assert len(json.loads(text)) == expected, text[:200]
        return [elapsed for elapsed, _text in done]

    cold: list[float] = []
    warm: list[float] = []
    saved_cold: list[float] = []
    grep: list[float] = []
    saved = True
    for round_ in range(rounds):
        cache = workdir / f"cache-{keys}-{round_}"  # empty: no saved index
        times = run(4, cache)
        cold.append(times[0])
        warm.append(statistics.median(times[1:]))
        saved = saved and bool(list(cache.rglob("*.idx")))  # written at the launcher's exit
        saved_cold.append(run(1, cache)[0])
        grep.append(grep_seconds(folder, expected))
    grep_ms = statistics.median(grep) * 1000
    cold_ms, warm_ms = statistics.median(cold) * 1000, statistics.median(warm) * 1000
    saved_ms = statistics.median(saved_cold) * 1000
    label = f"{keys // 1000}k keys"
    return {
        f"search_memory {label} / grep ratio, cold: no saved index (target <= 1.0)": cold_ms
        / grep_ms,
        f"search_memory {label} / grep ratio, warm (target <= 1.0)": warm_ms / grep_ms,
        f"search_memory {label} / grep ratio, cold with an index saved by an earlier launcher": (
            saved_ms / grep_ms
        ),
        f"search_memory {label} cold, no saved index (ms)": cold_ms,
        f"search_memory {label} warm (ms)": warm_ms,
        f"search_memory {label} cold, saved index (ms)": saved_ms,
        f"grep -rFil {label} (ms)": grep_ms,
        f"search_memory {label} index saved at exit (1 = yes)": float(saved),
    }


async def paired_call_seconds(
    commands: dict[str, list[str]], env: dict[str, str], calls: list[tuple[str, dict]]
) -> dict[str, list[float]]:
    """Both servers started and live at once; each call goes to one, then the other (the
    order alternating), so a burst of load elsewhere on the machine hits both alike."""
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    async with open_sessions(
        {name: (command, env) for name, command in commands.items()}
    ) as opened:
        sessions = {name: session for name, (session, _) in opened.items()}
        for session in sessions.values():
            await session.list_tools()  # as clients do first (the SDK caches output schemas)
            await session.call_tool("write_memory", {"key": "warm", "value": "up"})
        for i, (tool, args) in enumerate(calls):
            order = list(sessions.items())
            for name, session in order if i % 2 == 0 else reversed(order):
                start = time.perf_counter()
                result = await session.call_tool(tool, args)
                seconds[name].append(time.perf_counter() - start)
                assert not result.is_error, str(result.content)[:300]
    return seconds


def bench_write(
    rounds: int, workdir: Path, sizes: tuple[int, ...] = (1, 4, 16)
) -> dict[str, float]:
    """write_memory through dpt-launch vs alone: both live at once, calls interleaved one by
    one (earlier runs, one server after the other, gave 0.77x-1.04x for the same code)."""
    config = launcher_config(workdir, workdir / "mem-write-launcher")
    commands = {
        "launcher": launch_command(config),
        "alone": [PY, "-m", "doc_processing_std_tools.memory"],
    }
    env = {
        **os.environ,
        "DPTTOOLS_MEMORY_DIR": str(workdir / "mem-write-alone"),
        "XDG_CACHE_HOME": str(workdir / "cache"),
        "FASTMCP_LOG_LEVEL": "WARNING",
    }
    seconds: dict[str, dict[int, float]] = {name: {} for name in commands}
    pair_ratios: dict[int, float] = {}
    for size in sizes:
        value = "v" * (size << 20)
        calls = [("write_memory", {"key": f"k{size}", "value": value})] * rounds
        done = anyio.run(paired_call_seconds, commands, env, calls)
        for name in commands:
            seconds[name][size] = statistics.median(done[name])
        pair_ratios[size] = statistics.median(
            a / b for a, b in zip(done["alone"], done["launcher"], strict=True)
        )
    top = sizes[-1]
    figures = {
        f"write_memory {top} MB launcher / alone ratio (target >= 0.90)": seconds["alone"][top]
        / seconds["launcher"][top],
        f"write_memory {top} MB launcher / alone ratio, median of call pairs (target >= 0.90)": (
            pair_ratios[top]
        ),
        f"write_memory launcher {top} MB / {sizes[0]} MB time ratio (linear: {top // sizes[0]})": (
            seconds["launcher"][top] / seconds["launcher"][sizes[0]]
        ),
        f"write_memory alone {top} MB / {sizes[0]} MB time ratio (linear: {top // sizes[0]})": (
            seconds["alone"][top] / seconds["alone"][sizes[0]]
        ),
    }
    for name in commands:
        for size in sizes:
            figures[f"write_memory {size} MB {name} (s)"] = seconds[name][size]
    return figures


def bench_rss(workdir: Path) -> dict[str, float]:
    folder = workdir / "mem-huge"
    make_folder(folder, 1000)
    write_sparse(folder / "huge.json")
    peak = list_and_search_peak(folder, "note", workdir / "cache")["rss_kb"]
    return {"list+search peak RSS with a 1 GB entry (MB) (target < 200)": peak / 1024}


def figures(quick: bool = False) -> dict[str, float]:
    rounds = 3 if quick else 7
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="dpt-memory-scale-") as tmp:
        workdir = Path(tmp)
        results.update(bench_search(10_000, rounds, workdir))
        results.update(bench_search(100_000, 1 if quick else max(3, rounds // 2), workdir))
        results.update(bench_write(4 if quick else 12, workdir))
        results.update(bench_rss(workdir))
    return results


if __name__ == "__main__":
    import figures_cli  # benchmarks/ is sys.path[0] when run as a script

    figures_cli.main(figures, __doc__, "fewer rounds")
