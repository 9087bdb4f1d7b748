"""Per-call cost of a tool on an external stdio server: through ``dpt-launch`` vs directly.

memory-tools (``python -m doc_processing_std_tools.memory``) is the external server.
The same official ``mcp`` client runs sequential ``write_memory`` + ``read_memory``
calls over stdio against (a) ``dpt-launch`` mounting it with ``command:``, (b) the
server started directly and (c) the server behind ``relay_floor.py``, a relay that only
copies bytes: what any relay costs on this machine (an extra process and its wake-ups),
to read (a) against. The three run side by side (``side_by_side.py``: all open at once,
blocks of calls in turn) and the median block rates are compared; the target is a
launcher / direct ratio of at least 0.90. On Linux it also reports the CPU ms per call
of the direct server, of ``dpt-launch`` itself (its child not counted) and of the server
behind it: steadier than calls/s when the machine is busy. Over stdio the launcher
relays these calls on its fast path (``launcher/external/fast_path.py``).

With ``--compare PATH`` (``run.py --compare``) the launcher and the direct server of the
checkout at PATH (``checkouts.py``: ``PYTHONPATH=PATH``) run in the same rounds, so the ratios
of both checkouts come from one run.

Run: ``python benchmarks/external.py [--quick] [--compare PATH]``. Machines here are shared and
noisy: read the ratio, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import anyio
from checkouts import checked, env_for  # (benchmarks/ is on sys.path: see run.py)
from report import Compared, Section, print_figures
from side_by_side import Measured, side_by_side

PY = sys.executable
RATIO = "external stdio tool: launcher / direct calls/s ratio (target >= 0.90)"
CALLS_PER_BLOCK = 40


async def measure(blocks: int, workdir: Path, other: Path | None = None) -> dict[str, Measured]:
    """The launcher, the direct server and the floor relay of this checkout side by side, and
    with *other*, the launcher and direct server of that checkout (``other launcher``,
    ``other direct``)."""
    config = workdir / "external.yaml"
    config.write_text(  # the child inherits DPTTOOLS_MEMORY_DIR (and PYTHONPATH) from the launcher
        f"servers:\n  memory:\n    command: {PY}\n    args: [-m, doc_processing_std_tools.memory]\n"
    )
    server = [PY, "-m", "doc_processing_std_tools.memory"]
    launcher = [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)]
    commands: dict[str, tuple[list[str], Path | None]] = {
        "launcher": (launcher, None),
        "direct": (server, None),
        "floor": ([PY, str(Path(__file__).with_name("relay_floor.py")), *server], None),
    }
    if other is not None:
        commands |= {"other launcher": (launcher, other), "other direct": (server, other)}
    servers = {
        name: (
            command,
            env_for(
                tree,
                {
                    **os.environ,
                    "FASTMCP_LOG_LEVEL": "WARNING",
                    "DPTTOOLS_MEMORY_DIR": str(workdir / f"mem-{i}"),
                },
            ),
        )
        for i, (name, (command, tree)) in enumerate(commands.items())
    }
    return await side_by_side(servers, blocks, CALLS_PER_BLOCK)


def relayed(launcher: Measured, direct: Measured) -> dict[str, float]:
    return {
        "external stdio tool: direct calls/s": direct.rate,
        "external stdio tool: through dpt-launch calls/s": launcher.rate,
        # CPU per call is steadier than calls/s on a busy machine: what the launcher adds
        "external stdio tool: server CPU ms per call, direct": direct.cpu_ms,
        "external stdio tool: dpt-launch's own CPU ms per call": launcher.cpu_ms,
        "external stdio tool: server CPU ms per call, behind dpt-launch": launcher.behind_cpu_ms,
        RATIO: launcher.rate / direct.rate,
    }


def figures(
    quick: bool = False, compare: tuple[str, Path] | None = None
) -> dict[str, float] | Compared:
    """The figures; with *compare* (label, checkout), that checkout's too, from the same rounds."""
    blocks = 10 if quick else 40
    with tempfile.TemporaryDirectory(prefix="dpt-bench-ext-") as tmp:
        got = anyio.run(measure, blocks, Path(tmp), compare[1] if compare else None)
    floor, direct = got["floor"], got["direct"]
    found = relayed(got["launcher"], direct)
    found |= {
        "external stdio tool: byte-copying relay's own CPU ms per call": floor.cpu_ms,
        "external stdio tool: server CPU ms per call, behind the byte-copying relay": (
            floor.behind_cpu_ms
        ),
        "external stdio tool: byte-copying relay / direct calls/s ratio (the floor of any relay)": (
            floor.rate / direct.rate
        ),
    }
    if compare is None:
        return found
    label, tree = compare
    return Compared(found, {label: (tree, relayed(got["other launcher"], got["other direct"]))})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--compare", type=Path, metavar="PATH", help="another checkout, too")
    args = parser.parse_args()
    compare = ("compared", checked(args.compare)) if args.compare else None
    got = figures(quick=args.quick, compare=compare)
    if isinstance(got, Compared):
        print_figures(Section("external", "this checkout", got.figures))
        for label, (tree, found) in got.others.items():
            print(f"  -- {label}: {tree}")
            print_figures(Section(f"external@{label}", str(tree), found))
    else:
        print_figures(Section("external", "this checkout", got))


if __name__ == "__main__":
    main()
