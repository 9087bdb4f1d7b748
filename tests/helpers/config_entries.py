"""YAML entries under ``servers:`` that several tests mount."""

from __future__ import annotations

import sys
from pathlib import Path

from helpers.paths import SERVERS

EXTERNAL = SERVERS / "external_server.py"


def external(name: str, counter: Path) -> str:
    """``external_server.py`` counting into *counter*, mounted as *name* under namespace *name*."""
    return (
        f"  {name}:\n    command: {sys.executable}\n    args: [{EXTERNAL}, {counter}]\n"
        f"    namespace: {name}\n"
    )


def memory(folder: Path) -> str:
    """memory-tools on the folder *folder*."""
    return f"  memory-tools:\n    settings: {{memory_dir: {folder}}}\n"
