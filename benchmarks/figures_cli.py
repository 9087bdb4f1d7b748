"""The command line the benchmark scripts share: ``python benchmarks/<topic>.py [--quick]``
runs the script's ``figures(quick)`` and prints each figure on a line of its own."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def main(figures: Callable[..., dict[str, float]], doc: str | None, quick_help: str) -> None:
    """Parse ``--quick`` (described by *quick_help*), then print ``figures(quick=...)``."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    args = parser.parse_args()
    for name, value in figures(quick=args.quick).items():
        print(f"  {name:<78} {value:10.3f}")
