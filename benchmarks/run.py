"""Speed figures, side by side in one run: interleaved rounds, medians, ratios.

Sections (each returns named figures, ``name -> value``, printed as they come):

1. ``import``: ``import doc_processing_std_tools`` (target: at most 30 ms over a bare interpreter).
2. ``first-list``: time to the first ``tools/list`` answer: ``dpt-launch`` (memory-tools mounted)
   vs a trivial one-tool FastMCP server started the same way (target ratio <= 1.10), plus the
   shipped ``configs/tools.yaml`` (all three servers, embedded redis-server).
3. ``calls``: ``write_memory`` + ``read_memory`` calls/s through ``dpt-launch`` vs memory-tools
   alone, side by side (``side_by_side.py``; target ratio >= 0.90). Equal on both sides: the
   interpreter, the event loop (``DPTTOOLS_EVENT_LOOP``: uvloop where installed), the stdio
   transport and its serving code (``launcher/cli/serve.py``'s ``run_stdio``), the logging and
   garbage-collector set-up (``serve_alone.py`` serves the module alone that way), the server
   object (memory-tools built from its settings), the client and the calls. What differs is
   the mount: the launcher's composition, its call rules and name exposure. ``python -m
   doc_processing_std_tools.memory`` (asyncio, fastmcp's stdio transport: how a user runs it
   alone) is measured beside them for reference. memory-tools mounted as an external stdio
   server (``command:``) vs a direct connection to it is ``external.py``'s section.
4. ``search``: ``search_memory`` over 10,000 keys, called over MCP through ``dpt-launch``, cold
   (no saved index) and warm, vs ``grep -rFil`` on the same folder (target <= 1.0x, both).
5. ``in-flight``: ``memory_insert`` into one file through ``dpt-launch`` with 1, 8 and 32 calls
   in flight on one stdio connection, from a raw pipelining JSON-RPC client (``pipelined.py``:
   the SDK client's own cost per call would hide the launcher's); calls/s, targets 8 / 1 >=
   0.90, 32 / 1 >= 0.80.
6. The other benchmark modules in :data:`EXTRA_SECTIONS` (``benchmarks/<name>.py`` exposing
   ``figures(quick: bool) -> dict[str, float]``; optionally ``unavailable() -> str | None``,
   ``SKIP_QUICK``, a ``compare`` parameter and ``note() -> str | None``, why some of its figures
   are missing), each skipped with a line when it cannot run. ``peers`` (``peers.py``) installs
   the aggregators it compares with into ``.bench-peers/``.

``--compare PATH`` runs the sections that can (``in-flight``, ``external``) on the checkout at
PATH too, interleaved with this one in the same rounds (``checkouts.py``): its figures are the
section ``KEY@LABEL`` (``--compare-label``, default ``before``).

Run: ``python benchmarks/run.py [--quick] [--only KEYS] [--compare PATH] [--report]``.
``--report`` merges the sections run into ``docs/performance/figures.json`` (each with its date,
machine and kind of run; the sections not run are kept), draws its charts (``pip install
'.[bench]'`` for matplotlib) and fills the docs pages from it (``render_docs.py``). Machines
here are shared and noisy: read ratios, not absolute numbers, and rerun before believing a
regression.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
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

from checkouts import checked, env_for  # noqa: E402
from figures_file import FIGURES_FILE  # noqa: E402
from pipelined import Pipelined  # noqa: E402
from report import Compared, Section, print_figures, write_report  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))  # tests/ holds the helpers benchmarks share
from side_by_side import Measured, side_by_side  # noqa: E402

from helpers.processes import cpu_seconds  # noqa: E402
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
    "tool_retrieval_baseline",
    "token_estimate",
    "telemetry",
    "console_overhead",
    "fleet",
    "suite_time",
    "peers",
]
# what an extra section needs installed: (a module, how to install it)
NEEDS = {
    "popoto_bench": ("popoto", "pip install '.[popoto]'"),
    "telemetry": ("opentelemetry.sdk", "pip install '.[otel]'"),  # the OTLP exporter
    "token_estimate": ("bpe_openai", "pip install '.[bench]'"),
}
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


def spawn_asking(
    command: list[str], cwd: Path, env: dict[str, str], request: dict[str, Any]
) -> subprocess.Popen[bytes]:
    """Spawn a stdio server and send, at once, initialize, initialized and *request* (id 2)."""
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
        request,
    )
    return proc


def finish(proc: subprocess.Popen[bytes]) -> None:
    """Close *proc*'s stdin (a stdio server's signal to stop) and wait for it to exit."""
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)


def first_list_seconds(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Spawn, initialize, send tools/list, wait for its answer (raw JSON-RPC over pipes).

    (wall seconds, the server's CPU seconds by then): on a shared machine the CPU time holds
    where the wall time follows the load."""
    start = time.perf_counter()
    proc = spawn_asking(command, cwd, env, message("tools/list", {}, id=2))
    receive(proc, 2)
    elapsed = time.perf_counter() - start
    cpu = cpu_seconds(proc.pid)
    finish(proc)
    return elapsed, cpu


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
    """Median ms to the first list per command; ``cpu NAME``: the median CPU ms by then;
    ``worst NAME``: the largest ratio to the trivial server's in one round (wall time)."""
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
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            time.sleep(SETTLE)  # the last command's children (a redis-server stopping) are gone
            samples[name].append(first_list_seconds(command, workdir, env))
    trivial = samples["trivial"]
    return {
        **{name: median_ms([wall for wall, _ in values]) for name, values in samples.items()},
        **{
            f"cpu {name}": median_ms([cpu for _, cpu in values]) for name, values in samples.items()
        },
        **{
            f"worst {name}": max(
                wall / base for (wall, _), (base, _) in zip(values, trivial, strict=True)
            )
            for name, values in samples.items()
        },
    }


# -- 3. calls per second -----------------------------------------------------------------


async def bench_calls(blocks: int, calls: int, workdir: Path) -> dict[str, Measured]:
    """memory-tools mounted in dpt-launch vs memory-tools alone on the same serving code
    (``serve_alone.py``), and, for reference, alone as ``python -m`` serves it."""
    config = workdir / "calls.yaml"
    config.write_text(
        f"servers:\n  memory:\n    server: memory-tools\n    settings: {{memory_dir: {workdir / 'mem-l'}}}\n"
    )
    commands = {
        "launcher": [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)],
        "alone": [PY, str(HERE / "serve_alone.py"), "memory"],
        "python -m": [PY, "-m", "doc_processing_std_tools.memory"],
    }
    servers = {
        name: (command, {**os.environ, "DPTTOOLS_MEMORY_DIR": str(workdir / f"mem-{i}")})
        for i, (name, command) in enumerate(commands.items())
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


def insert_rate(client: Pipelined, path: str, calls: int, in_flight: int) -> float:
    """calls/s of *calls* ``memory_insert`` at line 0 of a new file, *in_flight* at a time."""
    client.call("memory_create", {"path": path, "file_text": ""})
    return client.rate(
        "memory_insert",
        lambda i: {"path": path, "insert_line": 0, "insert_text": f"line {i}"},
        calls,
        in_flight,
    )


def bench_in_flight(
    rounds: int, calls: int, workdir: Path, trees: dict[str, Path | None]
) -> dict[str, dict[int, float]]:
    """Median calls/s per checkout (*trees*: label -> its path, None for this one) and level
    over *rounds* rounds: every launcher open at once, the levels and checkouts interleaved
    (both orders reversed each round), each block on a fresh file so every level edits files
    of the same sizes."""
    rates = {label: {level: [] for level in IN_FLIGHT} for label in trees}
    order, labels = list(IN_FLIGHT), list(trees)
    with contextlib.ExitStack() as stack:
        clients = {}
        for i, (label, tree) in enumerate(trees.items()):
            config = workdir / f"in-flight-{i}.yaml"
            config.write_text(
                f"servers:\n  memory:\n    server: memory-tools\n"
                f"    settings: {{memory_dir: {workdir / f'mem-if-{i}'}}}\n"
            )
            command = [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)]
            env = env_for(tree, {**os.environ, "FASTMCP_LOG_LEVEL": "WARNING"})
            clients[label] = stack.enter_context(Pipelined(command, env, cwd=workdir))
        for client in clients.values():
            insert_rate(client, "/warm.md", 32, 4)
        for round_ in range(rounds):
            for level in order:
                for label in labels:
                    path = f"/r{round_}-{level}.md"
                    rates[label][level].append(insert_rate(clients[label], path, calls, level))
                labels.reverse()
            order.reverse()
    return {
        label: {level: statistics.median(values) for level, values in by_level.items()}
        for label, by_level in rates.items()
    }


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
    launcher, alone, shipped = calls["launcher"], calls["alone"], calls["python -m"]
    return {
        "memory-tools through dpt-launch (calls/s)": launcher.rate,
        "memory-tools alone, served as dpt-launch serves (calls/s)": alone.rate,
        "memory-tools alone, python -m doc_processing_std_tools.memory (calls/s)": shipped.rate,
        "calls/s launcher / alone ratio, same loop and transport (target >= 0.90)": (
            launcher.rate / alone.rate
        ),
        "calls/s launcher / python -m alone ratio (another loop and transport)": (
            launcher.rate / shipped.rate
        ),
        "dpt-launch CPU ms per call": launcher.cpu_ms,
        "alone, served as dpt-launch serves: CPU ms per call": alone.cpu_ms,
        "python -m alone: CPU ms per call": shipped.cpu_ms,
        "what the mount costs: CPU ms per call, launcher - alone": launcher.cpu_ms - alone.cpu_ms,
    }


def section_search(rounds: int, workdir: Path) -> dict[str, float]:
    return bench_search(10_000, rounds, workdir)


def in_flight_figures(rates: dict[int, float]) -> dict[str, float]:
    figures = {
        f"memory_insert, one file, {level} in flight (calls/s)": rate
        for level, rate in rates.items()
    }
    figures["memory_insert 8 / 1 in flight ratio (target >= 0.90)"] = rates[8] / rates[1]
    figures["memory_insert 32 / 1 in flight ratio (target >= 0.80)"] = rates[32] / rates[1]
    return figures


def section_in_flight(
    quick: bool, workdir: Path, compare: tuple[str, Path] | None
) -> dict[str, float] | Compared:
    trees: dict[str, Path | None] = {"": None}
    if compare:
        trees[compare[0]] = compare[1]
    rates = bench_in_flight(3 if quick else 7, 96 if quick else 192, workdir, trees)
    figures = in_flight_figures(rates[""])
    if not compare:
        return figures
    return Compared(figures, {compare[0]: (compare[1], in_flight_figures(rates[compare[0]]))})


def skip_reason(name: str, quick: bool, skip_popoto: bool) -> str | None:
    """Why ``benchmarks/<name>.py`` cannot give figures now, or None."""
    if name == "popoto_bench" and skip_popoto:
        return "skipped: --skip-popoto"
    if name in NEEDS and importlib.util.find_spec(NEEDS[name][0]) is None:
        return f"skipped: {NEEDS[name][1]}"
    if importlib.util.find_spec(name) is None:
        return f"skipped: benchmarks/{name}.py not present"
    module = importlib.import_module(name)
    if not hasattr(module, "figures"):
        return f"skipped: benchmarks/{name}.py has no figures(quick)"
    if quick and getattr(module, "SKIP_QUICK", None):
        return f"skipped in a quick run: {module.SKIP_QUICK}"
    why = module.unavailable() if hasattr(module, "unavailable") else None
    return f"skipped: {why}" if why else None


# -- main ------------------------------------------------------------------------------------


def run_section(
    title: str, key: str, measure: Callable[[], dict[str, float] | Compared]
) -> list[Section]:
    """Run one section, print it as it comes; a failure is printed and recorded, not fatal.
    A comparison gives a ``KEY@LABEL`` section per other checkout."""
    print(title)
    start = time.perf_counter()
    others: list[Section] = []
    try:
        got = measure()
        section = Section(key, title, got.figures if isinstance(got, Compared) else got)
        if isinstance(got, Compared):
            others = [
                Section(f"{key}@{label}", f"{title}: {label}, {tree}", figures, compared_with=tree)
                for label, (tree, figures) in got.others.items()
            ]
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        section = Section(key, title, {}, f"failed: {type(exc).__name__}: {exc}"[:300])
    section.seconds = time.perf_counter() - start
    for each in [section, *others]:
        each.seconds, each.finished = section.seconds, time.time()
        if each is not section:
            print(f"  -- {each.key}")
        print_figures(each)
    return [section, *others]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--skip-popoto", action="store_true")
    parser.add_argument(
        "--only", default="", help="comma-separated section keys to run (e.g. import,search)"
    )
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="PATH",
        help="also run in-flight and external on the checkout at PATH, interleaved",
    )
    parser.add_argument(
        "--compare-label", default="before", help="its sections' label: KEY@LABEL (before)"
    )
    parser.add_argument(
        "--report",
        nargs="?",
        const=str(FIGURES_FILE),
        default=None,
        metavar="PATH",
        help="merge the figures into PATH (default docs/performance/figures.json), draw its "
        "charts and fill the docs pages from it",
    )
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else 9
    only = {key for key in args.only.split(",") if key}
    with_popoto = importlib.util.find_spec("popoto") is not None and not args.skip_popoto
    compare = None
    if args.compare:
        compare = (args.compare_label, checked(args.compare))
    wanted = lambda key: not only or key in only  # noqa: E731
    sections: list[Section] = []

    with tempfile.TemporaryDirectory(prefix="dpt-bench-") as tmp:
        workdir = Path(tmp)
        ours: list[tuple[str, str, Callable[[], dict[str, float] | Compared]]] = [
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
                "3. write_memory+read_memory over stdio, sequential: launcher vs alone on the same "
                "loop and transport (median calls/s)",
                "calls",
                lambda: section_calls(args.quick, workdir),
            ),
            (
                "4. search_memory over 10,000 keys vs grep -rFil (median)",
                "search",
                lambda: section_search(rounds, workdir),
            ),
            (
                "5. memory_insert into one file through dpt-launch, 1 / 8 / 32 in flight on one "
                "stdio connection, raw pipelining client (median calls/s)",
                "in-flight",
                lambda: section_in_flight(args.quick, workdir, compare),
            ),
        ]
        for title, key, measure in ours:
            if wanted(key):
                sections += run_section(title, key, measure)

    for number, name in enumerate(EXTRA_SECTIONS, start=len(ours) + 1):
        if not wanted(name):
            continue
        title = f"{number}. {name} (benchmarks/{name}.py)"
        why = skip_reason(name, args.quick, args.skip_popoto)
        if why is None:
            module = importlib.import_module(name)
            takes_compare = "compare" in inspect.signature(module.figures).parameters
            measure = (
                (lambda module=module: module.figures(args.quick, compare=compare))
                if takes_compare and compare
                else (lambda module=module: dict(module.figures(args.quick)))
            )
            ran = run_section(title, name, measure)
            if hasattr(module, "note") and ran[0].figures:  # why some figures are n/a
                ran[0].note = module.note()
            sections += ran
            continue
        print(title)
        section = Section(name, title, {}, why)
        print_figures(section)
        sections.append(section)

    if args.report:
        written = write_report(sections, Path(args.report), quick=args.quick, rounds=rounds)
        print(f"report: {', '.join(str(path) for path in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
