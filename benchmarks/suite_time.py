"""How long the README's test command takes: ``pytest`` (the default lane, pyproject's
``addopts``: ``-n auto``) and ``pytest -m slow`` (the storms, soaks, fleets and lifecycle tests
it leaves out), in this checkout with this interpreter, one after the other.

Each is timed from start to exit, with the count of tests it ran; a failed or errored test is
counted too and fails the section (a time of a red suite is no figure). Not run by ``--quick``:
it is the whole suite.

Run: ``python benchmarks/suite_time.py`` (``--fast``: the default lane only).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SKIP_QUICK = "it runs the whole test suite (run.py --only suite_time)"
COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)")


class SuiteFailed(Exception):
    """A lane of the suite did not pass: its time is no figure."""


def lane(args: list[str]) -> tuple[float, dict[str, int]]:
    """Seconds of ``pytest ARGS`` in the checkout, and its summary's counts."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],  # (addopts has -q)
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    counts = {kind.rstrip("s"): int(n) for n, kind in COUNTS.findall(summary)}
    if done.returncode != 0 or counts.get("failed") or counts.get("error"):
        raise SuiteFailed(f"pytest {' '.join(args)}: {summary or done.stderr.strip()[-300:]}")
    return seconds, counts


def figures(quick: bool = False, slow: bool = True) -> dict[str, float]:
    found: dict[str, float] = {}
    lanes = {"pytest": []} | ({"pytest -m slow": ["-m", "slow"]} if slow else {})
    for name, args in lanes.items():
        seconds, counts = lane(args)
        found[f"{name}: wall time (s)"] = seconds
        found[f"{name}: tests passed (count)"] = counts.get("passed", 0)
        found[f"{name}: tests skipped (count)"] = counts.get("skipped", 0)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="the default lane only")
    args = parser.parse_args()
    for name, value in figures(slow=not args.fast).items():
        print(f"  {name:<40} {value:10.1f}")


if __name__ == "__main__":
    main()
