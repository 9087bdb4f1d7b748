"""The ``filesystem`` server: the reference MCP filesystem tools, confined to root folders.

Tool names and parameters follow ``@modelcontextprotocol/server-filesystem``. Every
path goes through :class:`~doc_processing_std_tools.containment.Jail`, which walks
each component through directory descriptors, so neither ``..``, absolute paths
nor symlinks (even ones swapped in while a call runs) lead outside the roots.
Every change runs under :func:`doc_processing_std_tools.locking.exclusive`.

The tool logic lives in :class:`FileSystem` (plain Python, raises
:class:`FileSystemError` with the user-facing message): reading tools in
``reads``, walks in ``walks``, writing tools in ``writes``, edit matching and
diffs in ``edits``; :func:`create_server` in ``server`` only wires it to FastMCP.

Roots, in this order: the ``roots`` setting; ``$DPTTOOLS_FS_ROOTS``; the client's
MCP roots (per session, see :mod:`~doc_processing_std_tools.workspace`); the
working directory, only when it looks like a project. With none of them the
tools stay listed and refuse every path with the fix.

Run it alone over stdio: ``dpt-filesystem [ROOT ...]`` (or ``python -m
doc_processing_std_tools.filesystem [ROOT ...]``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import wiring
from ..globs import glob_match as glob_match  # re-exported: the one-pattern matcher
from ..servers import ServerSpec
from .base import MAX_TREE_DEPTH, EditOperation, FileSystemError, format_size
from .edits import apply_edit, unified_diff
from .server import create_server
from .sessions import SessionFileSystems
from .settings import (
    LOCKS_ITSELF,
    ROOTS_ENV,
    SERVER_NAME,
    Settings,
    check,
    describe,
    fixed_roots,
)
from .tools import FileSystem

if TYPE_CHECKING:
    from fastmcp import FastMCP

    filesystem_server: FastMCP

__all__ = [
    "LOCKS_ITSELF",
    "MAX_TREE_DEPTH",
    "ROOTS_ENV",
    "SERVER_NAME",
    "SPEC",
    "EditOperation",
    "FileSystem",
    "FileSystemError",
    "SessionFileSystems",
    "Settings",
    "apply_edit",
    "check",
    "create_server",
    "describe",
    "fixed_roots",
    "format_size",
    "main",
    "standalone_server",
    "unified_diff",
]

SPEC = ServerSpec(
    name=SERVER_NAME,
    create=create_server,
    settings=Settings,
    check=check,
    describe=describe,
    locks_itself=LOCKS_ITSELF,
)


def standalone_server(roots: Sequence[str] = ()) -> FastMCP:
    """The filesystem server on its own: *roots*, else the environment's, following the
    client's roots when there are none."""
    from ..workspace import watch_client_roots

    settings = Settings(roots=list(roots)) if roots else Settings()
    return watch_client_roots(create_server(settings))


__getattr__: Any = wiring.lazy_server(__name__, "filesystem_server", standalone_server)


def main(argv: Sequence[str] | None = None) -> None:
    """``dpt-filesystem [ROOT ...]``: serve over stdio; roots from the arguments, else
    ``$DPTTOOLS_FS_ROOTS``, else the client's roots, else a project working directory."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        wiring.main(SERVER_NAME, standalone_server, args)
    wiring.main(SERVER_NAME, lambda: standalone_server(args), [])
