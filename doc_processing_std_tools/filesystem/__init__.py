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
"""The server's :class:`~doc_processing_std_tools.servers.ServerSpec`, registered as
``filesystem``."""
standalone_server = _package.standalone_server
"""A new FastMCP server running on its own, as ``dpt-filesystem`` serves it: the roots given,
else ``$DPTTOOLS_FS_ROOTS``, else the client's MCP roots, else the working directory when it is
a project folder.

Args:
    args (Sequence[str]): Root folders; none: as described above.
"""
main = _package.main
"""Serve filesystem over stdio: ``dpt-filesystem [ROOT ...]`` /
``python -m doc_processing_std_tools.filesystem``.

Args:
    argv (Sequence[str] | None): The command-line arguments (root folders);
        ``sys.argv[1:]`` when ``None``. ``-h`` prints the usage.

Raises:
    SystemExit: 2, with one line on stderr, when the settings are wrong.
"""
__getattr__: Any = _package.module_getattr
