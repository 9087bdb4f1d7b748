"""Speed figures, side by side in one run: interleaved rounds, medians, ratios.

Sections (each returns named figures, ``name -> value``, printed as they come):

1. ``import``: ``import doc_processing_std_tools`` (target: at most 30 ms over a bare interpreter).
2. ``first-list``: time to the first ``tools/list`` answer: ``dpt-launch`` (memory-tools mounted)
   vs a trivial one-tool FastMCP server started the same way (target ratio <= 1.10), plus the
   shipped ``configs/tools.yaml`` (all three servers, embedded redis-server).
3. ``calls``: ``write_memory`` + ``read_memory`` calls/s through ``dpt-launch`` vs memory-tools
   run alone, side by side (``side_by_side.py``; target ratio >= 0.90). memory-tools mounted
   as an external stdio server (``command:``) vs a direct connection to it is ``external.py``'s
   section (target ratio >= 0.90).
4. ``search``: ``search_memory`` over 10,000 keys, called over MCP through ``dpt-launch``, cold
   (no saved index) and warm, vs ``grep -rFil`` on the same folder (target <= 1.0x, both).
5. ``in-flight``: ``memory_insert`` into one file through ``dpt-launch`` with 1, 8 and 32 calls in
   flight on one session (calls/s; targets: 8 / 1 >= 0.90, 32 / 1 >= 0.80).
6. The other benchmark modules in :data:`EXTRA_SECTIONS` (``benchmarks/<name>.py`` exposing
   ``figures(quick: bool) -> dict[str, float]``), each skipped with a line when missing.

Run: ``python benchmarks/run.py [--quick] [--report]``. ``--report`` also writes
``docs/performance.md`` (a table of every figure, with targets) and its charts under
``docs/performance/`` (``pip install '.[bench]'`` for matplotlib). Machines here are shared
and noisy: read ratios, not absolute numbers, and rerun before believing a regression.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
sys.path.insert(0, str(HERE))

from report import Section, print_figures, write_report  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))  # tests/ holds the helpers benchmarks share
from side_by_side import Measured, open_sessions, side_by_side  # noqa: E402

from helpers.rpc import initialize_params, message, receive, send  # noqa: E402

# Benchmark modules under benchmarks/ with figures(quick) -> dict[str, float], run after ours.
EXTRA_SECTIONS = [
    "external",
    "memory_scale",
    "memory_redis",
    "filesystem_bounds",
    "startup",
    "resources",
    "popoto_bench",
    "tool_retrieval",
    "telemetry",
]
POPOTO_SECTIONS = {"popoto_bench"}
OTEL_SECTIONS = {"telemetry"}  # need the otel extra (the OTLP exporter)
SETTLE = 1.0  # seconds between start-up samples: two cores, and a stopping redis-server

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


# -- 1. import cost -----------------------------------------------------------------


TIMED_IMPORT = (
    "import time; start = time.perf_counter(); import doc_processing_std_tools; "
    "print(time.perf_counter() - start)"
)


def bench_import(rounds: int) -> dict[str, float]:
    """Wall time of fresh interpreters, bare and importing us; and the import statement's own
    time inside one. The import cost is that last figure: a difference of two ~30 ms wall
    times buries a few ms in the start-up's noise (it read below zero)."""
    base: list[float] = []
    ours: list[float] = []
    inside: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run([PY, "-c", "pass"], check=True)
        base.append(time.perf_counter() - start)
        start = time.perf_counter()
        done = subprocess.run([PY, "-c", TIMED_IMPORT], check=True, capture_output=True, text=True)
        ours.append(time.perf_counter() - start)
        inside.append(float(done.stdout))
    return {"bare_ms": median_ms(base), "import_ms": median_ms(ours), "cost_ms": median_ms(inside)}


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
    send(
        proc,
        message("initialize", initialize_params("bench"), id=1),
        message("notifications/initialized"),
        message("tools/list", {}, id=2),
    )
    receive(proc, 2)
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait(timeout=30)
    return elapsed


def precompile_package() -> None:
    """Byte-compile the package, as ``pip install`` does for fastmcp and every installed package.

    An editable install under ``PYTHONDONTWRITEBYTECODE=1`` (this machine's default) never
    caches our bytecode, so every launcher start would compile ~13,000 lines that a user's
    install has compiled once, while the trivial server's imports are all cached.
    """
    import compileall

    import doc_processing_std_tools

    compileall.compile_dir(
        Path(doc_processing_std_tools.__file__).parent, quiet=1, force=False, workers=1
    )


def bench_first_list(rounds: int, workdir: Path, redis_url: str | None) -> dict[str, float]:
    precompile_package()
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
            time.sleep(SETTLE)  # the last command's children (a redis-server stopping) are gone
            samples[name].append(first_list_seconds(command, workdir, env))
    return {name: median_ms(values) for name, values in samples.items()}


# -- 3. calls per second -----------------------------------------------------------------


async def bench_calls(blocks: int, calls: int, workdir: Path) -> dict[str, Measured]:
    """memory-tools mounted in dpt-launch vs memory-tools alone, side by side."""
    config = workdir / "calls.yaml"
    config.write_text(
        f"servers:\n  memory:\n    server: memory-tools\n    settings: {{memory_dir: {workdir / 'mem-l'}}}\n"
    )
    commands = {
        "launcher": [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)],
        "alone": [PY, "-m", "doc_processing_std_tools.memory"],
    }
    servers = {
        name: (command, {**os.environ, "DPTTOOLS_MEMORY_DIR": str(workdir / f"mem-{name}")})
        for name, command in commands.items()
    }
    return await side_by_side(servers, blocks, calls)


# -- 4. search over 10,000 keys vs grep ---------------------------------------------------


def bench_search(keys: int, rounds: int, workdir: Path) -> dict[str, float]:
    """``search_memory`` over MCP in a ``dpt-launch`` subprocess, cold (no saved index) and
    warm, vs ``grep -rFil`` (``memory_scale.bench_search``)."""
    from memory_scale import bench_search as over_mcp

    return over_mcp(keys, rounds, workdir / "search")


# -- 5. memory_insert into one file, 1 / 8 / 32 calls in flight -------------------------

IN_FLIGHT = (1, 8, 32)


async def insert_rate(session: Any, path: str, calls: int, in_flight: int) -> float:
    """calls/s of *calls* ``memory_insert`` at line 0 of a new file, *in_flight* at a time."""
    created = await session.call_tool("memory_create", {"path": path, "file_text": ""})
    assert not created.is_error, created
    left = iter(range(calls))

    async def worker() -> None:
        for i in left:
            arguments = {"path": path, "insert_line": 0, "insert_text": f"line {i}"}
            result = await session.call_tool("memory_insert", arguments)
            assert not result.is_error, result

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(in_flight):
            group.start_soon(worker)
    return calls / (time.perf_counter() - start)


async def bench_in_flight(rounds: int, calls: int, workdir: Path) -> dict[int, float]:
    """Median calls/s per level over *rounds* rounds, the levels interleaved (order reversed each
    round), each block on a fresh file so every level edits files of the same sizes."""
    config = workdir / "in-flight.yaml"
    config.write_text(
        f"servers:\n  memory:\n    server: memory-tools\n    settings: {{memory_dir: {workdir / 'mem-if'}}}\n"
    )
    command = [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)]
    env = {**os.environ, "FASTMCP_LOG_LEVEL": "WARNING"}
    rates: dict[int, list[float]] = {level: [] for level in IN_FLIGHT}
    order = list(IN_FLIGHT)
    async with open_sessions({"launcher": (command, env)}) as opened:
        session, _ = opened["launcher"]
        await session.list_tools()
        await insert_rate(session, "/warm.md", 20, 4)
        for round_ in range(rounds):
            for level in order:
                rate = await insert_rate(session, f"/r{round_}-{level}.md", calls, level)
                rates[level].append(rate)
            order.reverse()
    return {level: statistics.median(values) for level, values in rates.items()}


# -- sections: named figures -------------------------------------------------------------


def section_import(rounds: int) -> dict[str, float]:
    imp = bench_import(rounds * 2)
    return {
        "python -c pass (ms)": imp["bare_ms"],
        "python -c 'import doc_processing_std_tools' (ms)": imp["import_ms"],
        "import cost (ms, target <= 30)": imp["cost_ms"],
    }


def section_first_list(rounds: int, workdir: Path, with_popoto: bool) -> dict[str, float]:
    redis_proc = None
    redis_url = None
    if with_popoto:
        from popoto_bench import start_test_redis

        redis_proc, port = start_test_redis(workdir)
        redis_url = f"redis://127.0.0.1:{port}/1"
    try:
        first = bench_first_list(rounds, workdir, redis_url)
    finally:
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
    figures = {
        "trivial one-tool FastMCP server (ms)": first["trivial"],
        "dpt-launch, memory-tools mounted (ms)": first["launcher"],
        "dpt-launch, configs/tools.yaml (3 servers, embedded redis) (ms)": first["shipped"],
        "first tools/list launcher / trivial ratio (target <= 1.10)": first["launcher"]
        / first["trivial"],
        "first tools/list shipped config / trivial ratio (target <= 1.10)": first["shipped"]
        / first["trivial"],
    }
    if redis_url:
        figures["dpt-launch, popoto-memory on a running redis (ms)"] = first["popoto-redis"]
        figures["dpt-launch, popoto-memory embedded (starts redis) (ms)"] = first["popoto-embedded"]
        figures["embedded - running: the cost of starting redis-server (ms)"] = (
            first["popoto-embedded"] - first["popoto-redis"]
        )
    return figures


def section_calls(quick: bool, workdir: Path) -> dict[str, float]:
    calls = anyio.run(bench_calls, 10 if quick else 30, 40, workdir)
    return {
        "memory-tools alone, python -m doc_processing_std_tools.memory (calls/s)": calls[
            "alone"
        ].rate,
        "memory-tools through dpt-launch (calls/s)": calls["launcher"].rate,
        "calls/s launcher / alone ratio (target >= 0.90)": calls["launcher"].rate
        / calls["alone"].rate,
    }


def section_search(rounds: int, workdir: Path) -> dict[str, float]:
    return bench_search(10_000, rounds, workdir)


def section_in_flight(quick: bool, workdir: Path) -> dict[str, float]:
    rates = anyio.run(bench_in_flight, 3 if quick else 7, 96, workdir)
    figures = {
        f"memory_insert, one file, {level} in flight (calls/s)": rate
        for level, rate in rates.items()
    }
    figures["memory_insert 8 / 1 in flight ratio (target >= 0.90)"] = rates[8] / rates[1]
    figures["memory_insert 32 / 1 in flight ratio (target >= 0.80)"] = rates[32] / rates[1]
    return figures


def skip_reason(name: str, with_popoto: bool, skip_popoto: bool) -> str | None:
    """Why ``benchmarks/<name>.py`` cannot give figures now, or None."""
    if name in POPOTO_SECTIONS and not with_popoto:
        return "skipped: " + ("--skip-popoto" if skip_popoto else "pip install '.[popoto]'")
    if name in OTEL_SECTIONS and importlib.util.find_spec("opentelemetry.sdk") is None:
        return "skipped: pip install '.[otel]'"
    if importlib.util.find_spec(name) is None:
        return f"skipped: benchmarks/{name}.py not present"
    if not hasattr(importlib.import_module(name), "figures"):
        return f"skipped: benchmarks/{name}.py has no figures(quick)"
    return None


# -- main ------------------------------------------------------------------------------------


def run_section(title: str, key: str, measure: Callable[[], dict[str, float]]) -> Section:
    """Run one section, print it as it comes; a failure is printed and recorded, not fatal."""
    print(title)
    start = time.perf_counter()
    try:
        section = Section(key, title, measure())
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        section = Section(key, title, {}, f"failed: {type(exc).__name__}: {exc}"[:300])
    section.seconds = time.perf_counter() - start
    print_figures(section)
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--skip-popoto", action="store_true")
    parser.add_argument(
        "--only", default="", help="comma-separated section keys to run (e.g. import,search)"
    )
    parser.add_argument(
        "--report",
        nargs="?",
        const=str(REPO / "docs" / "performance.md"),
        default=None,
        metavar="PATH",
        help="also write the figures and charts to PATH (default docs/performance.md)",
    )
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else 9
    only = {key for key in args.only.split(",") if key}
    with_popoto = importlib.util.find_spec("popoto") is not None and not args.skip_popoto
    wanted = lambda key: not only or key in only  # noqa: E731
    started = time.time()
    sections: list[Section] = []

    with tempfile.TemporaryDirectory(prefix="dpt-bench-") as tmp:
        workdir = Path(tmp)
        ours: list[tuple[str, str, Callable[[], dict[str, float]]]] = [
            (
                "1. import cost (median of fresh interpreters)",
                "import",
                lambda: section_import(rounds),
            ),
            (
                "2. spawn -> initialize -> first tools/list answer (median)",
                "first-list",
                lambda: section_first_list(rounds, workdir, with_popoto),
            ),
            (
                "3. write_memory+read_memory over stdio, sequential (median calls/s)",
                "calls",
                lambda: section_calls(args.quick, workdir),
            ),
            (
                "4. search_memory over 10,000 keys vs grep -rFil (median)",
                "search",
                lambda: section_search(rounds, workdir),
            ),
            (
                "5. memory_insert into one file through dpt-launch, 1 / 8 / 32 in flight (median calls/s)",
                "in-flight",
                lambda: section_in_flight(args.quick, workdir),
            ),
        ]
        for title, key, measure in ours:
            if wanted(key):
                sections.append(run_section(title, key, measure))

    for number, name in enumerate(EXTRA_SECTIONS, start=len(ours) + 1):
        if not wanted(name):
            continue
        title = f"{number}. {name} (benchmarks/{name}.py)"
        why = skip_reason(name, with_popoto, args.skip_popoto)
        if why is None:
            module = importlib.import_module(name)
            measure = lambda module=module: dict(module.figures(args.quick))  # noqa: E731
            sections.append(run_section(title, name, measure))
            continue
        print(title)
        section = Section(name, title, {}, why)
        print_figures(section)
        sections.append(section)
        if name == "popoto_bench" and "no figures" in why:  # its output, as before
            importlib.import_module(name).main()

    if args.report:
        written = write_report(
            sections,
            Path(args.report),
            quick=args.quick,
            rounds=rounds,
            elapsed=time.time() - started,
        )
        print(f"report: {', '.join(str(path) for path in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
