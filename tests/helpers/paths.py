"""Where things are: the repository, ``tests/`` and the helper servers that tests spawn by path."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
SERVERS = TESTS / "helpers" / "servers"


def python_path(*first: str | Path) -> str:
    """A ``PYTHONPATH`` for a spawned process: *first*, then ``tests/`` (so a launcher can mount
    ``module: helpers.servers...``), then the one this process was given."""
    parts = [*map(str, first), str(TESTS), os.environ.get("PYTHONPATH")]
    return os.pathsep.join(filter(None, parts))
