"""Another checkout of this project, run side by side with this one (``--compare PATH``).

Its launcher runs with ``PYTHONPATH=PATH``, ahead of this checkout's editable install, with the
same interpreter and installed dependencies: what differs is the project's own code. Relayed
servers the launcher starts inherit the variable, so they run the other checkout's code too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

PACKAGE = "doc_processing_std_tools"


class CheckoutError(Exception):
    """The path is no checkout of this project, or its package does not import from it."""


def env_for(tree: Path | None, env: Mapping[str, str]) -> dict[str, str]:
    """*env* for a process running the checkout at *tree* (this one for None)."""
    if tree is None:
        return dict(env)
    paths = [str(tree), *filter(None, [env.get("PYTHONPATH", "")])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def checked(tree: Path) -> Path:
    """*tree*, resolved, once its package imports from there under :func:`env_for`."""
    tree = tree.expanduser().resolve()
    if not (tree / PACKAGE / "__init__.py").is_file():
        raise CheckoutError(f"{tree}: no {PACKAGE}/ here; give a checkout of this project")
    found = subprocess.run(
        [sys.executable, "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
        capture_output=True,
        text=True,
        env=env_for(tree, os.environ),
        cwd="/",
    )
    where = Path(found.stdout.strip() or "?").resolve()
    if found.returncode != 0 or not where.is_relative_to(tree):
        raise CheckoutError(
            f"{tree}: {PACKAGE} imports from {where} under PYTHONPATH={tree} "
            f"({found.stderr.strip()[-200:] or 'no error'})"
        )
    return tree
