"""The pip command a fix line names: this interpreter's own, as the README installs it
(``.venv/bin/pip``), so the extra lands where ``dpt-launch`` runs, not in whatever ``pip`` is
first on ``PATH``."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

PACKAGE = "doc-processing-std-tools"


def pip_command() -> str:
    """The virtual environment's pip (``.venv/bin/pip`` from the folder holding ``.venv``,
    else its absolute path), else ``python -m pip`` of this interpreter, else ``pip``."""
    if sys.prefix == sys.base_prefix:
        return "pip"
    folder = Path(sys.executable).parent
    pip = folder / ("pip.exe" if os.name == "nt" else "pip")
    if not pip.exists():
        return f"{shlex.quote(sys.executable)} -m pip"
    project = Path(sys.prefix).parent  # (the clone the README makes .venv in)
    shown = pip.relative_to(project) if Path.cwd() == project else pip
    return shlex.quote(str(shown))


def install_extra(extra: str) -> str:
    """The command that installs *extra* of this package where it runs."""
    return f"{pip_command()} install '{PACKAGE}[{extra}]'"


def install_package(name: str) -> str:
    """The command that installs the distribution *name* where this package runs."""
    return f"{pip_command()} install {name}"
