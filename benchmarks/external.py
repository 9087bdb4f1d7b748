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

Run: ``python benchmarks/external.py [--quick]``. Machines here are shared and noisy:
read the ratio, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import anyio
from side_by_side import Measured, side_by_side  # (benchmarks/ is on sys.path: see run.py)

PY = sys.executable
RATIO = "external stdio tool: launcher / direct calls/s ratio (target >= 0.90)"
CALLS_PER_BLOCK = 40


async def measure(blocks: int, workdir: Path) -> dict[str, Measured]:
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
    servers = {
        name: (
            command,
            {
                **os.environ,
                "FASTMCP_LOG_LEVEL": "WARNING",
                "DPTTOOLS_MEMORY_DIR": str(workdir / f"mem-{name}"),
            },
        )
        for name, command in commands.items()
    }
    return await side_by_side(servers, blocks, CALLS_PER_BLOCK)


def figures(quick: bool = False) -> dict[str, float]:
    blocks = 10 if quick else 40
    with tempfile.TemporaryDirectory(prefix="dpt-bench-ext-") as tmp:
        got = anyio.run(measure, blocks, Path(tmp))
    launcher, direct, floor = got["launcher"], got["direct"], got["floor"]
    return {
        "external stdio tool: direct calls/s": direct.rate,
        "external stdio tool: through dpt-launch calls/s": launcher.rate,
        # CPU per call is steadier than calls/s on a busy machine: what the launcher adds
        "external stdio tool: server CPU ms per call, direct": direct.cpu_ms,
        "external stdio tool: dpt-launch's own CPU ms per call": launcher.cpu_ms,
        "external stdio tool: server CPU ms per call, behind dpt-launch": launcher.behind_cpu_ms,
        "external stdio tool: byte-copying relay's own CPU ms per call": floor.cpu_ms,
        "external stdio tool: server CPU ms per call, behind the byte-copying relay": (
            floor.behind_cpu_ms
        ),
        "external stdio tool: byte-copying relay / direct calls/s ratio (the floor of any relay)": (
            floor.rate / direct.rate
        ),
        RATIO: launcher.rate / direct.rate,
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
