"""Soak: the SIGKILL storm of ``tests/end_to_end/test_crash_storm.py`` (``tests/helpers/crash_storm.py``) for 100 rounds (CI runs 10).

Real ``dpt-launch`` processes with memory-tools and filesystem on one folder, writes over
stdio with the official mcp client, each launcher SIGKILLed mid-write; after each round
nothing acknowledged is lost, nothing is torn, no temp file is visible through any tool,
and at the end the dead writers' temp files are swept at start.

Run: ``python benchmarks/soak.py [--rounds N] [--quick]`` (exit 1 on any problem).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

SOAK_ROUNDS = 100
QUICK_ROUNDS = 10


def run(rounds: int) -> tuple[dict[str, float], list[str]]:
    """Run the storm; (figures, problems)."""
    from helpers.crash_storm import storm

    with tempfile.TemporaryDirectory(prefix="dpt-soak-") as tmp:
        start = time.perf_counter()
        report = anyio.run(storm, Path(tmp) / "shared", rounds)
        elapsed = time.perf_counter() - start
    figures = {
        "storm rounds (SIGKILL each)": float(report.rounds),
        "storm acknowledged calls": float(report.calls),
        "storm kills that caught a call in flight": float(report.killed_mid_call),
        "storm temp files on disk after the kills (summed)": float(report.litter_seen),
        "storm problems: lost, torn or visible litter (target 0)": float(len(report.problems)),
        "storm seconds": elapsed,
    }
    return figures, report.problems


def figures(quick: bool = False) -> dict[str, float]:
    return run(QUICK_ROUNDS if quick else SOAK_ROUNDS)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_ROUNDS} rounds")
    args = parser.parse_args()
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else SOAK_ROUNDS)
    values, problems = run(rounds)
    for name, value in values.items():
        print(f"  {name:<58} {value:,.0f}" if value == int(value) else f"  {name:<58} {value:.1f}")
    for problem in problems[:50]:
        print(f"  PROBLEM: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
