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
MCP roots (per session, see :mod:`~doc_processing_std_tools.shared.workspace`); the
working directory, only when it looks like a project. With none of them the
tools stay listed and refuse every path with the fix.

Run it alone over stdio: ``dpt-filesystem [ROOT ...]`` (or ``python -m
doc_processing_std_tools.filesystem [ROOT ...]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..shared import server_module as wiring
from ..shared.globs import glob_match as glob_match  # re-exported: the one-pattern matcher
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

# After the imports above: SPEC is read from them (see wiring.ServerModule).
_package = wiring.ServerModule(
    __name__,
    SERVER_NAME,
    export="filesystem_server",
    settings_from_args=lambda roots: Settings(roots=roots),
)
SPEC = _package.spec
standalone_server = _package.standalone_server  # roots given, else as main() says
# dpt-filesystem [ROOT ...]: roots from the arguments, else $DPTTOOLS_FS_ROOTS, else the
# client's roots, else a project working directory.
main = _package.main
__getattr__: Any = _package.module_getattr
