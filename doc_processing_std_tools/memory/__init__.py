"""``memory-tools``: agent memory in one folder, through two interfaces.

* **Key-value tools** (``write_memory``, ``read_memory``, ``search_memory``,
  ``list_memory_keys``, ``delete_memory``): each key is stored as ``<key>.json``
  at the top of the memory directory, holding ``{"key": ..., "value": ...}``.
* **File tools** modelled on Anthropic's memory tool (``memory_view``,
  ``memory_create``, ``memory_str_replace``, ``memory_insert``, ``memory_delete``,
  ``memory_rename``): paths are relative to the memory directory, ``/`` is the
  directory itself.

Both work on the same folder, so a ``notes.json`` made with ``memory_create``
is also the key ``notes``. Decisions where the two meet:

* Every top-level, non-hidden ``*.json`` regular file (or symlink resolving
  inside the folder) is an entry. When its content is our ``{"key", "value"}``
  shape (both strings) and the stored key flattens to the file name, that key
  and value are used. Otherwise the file name stem is the key and the file's
  raw text is the value. A file that is not UTF-8 is listed by its stem,
  skipped by search, and ``read_memory`` explains it cannot be read.
* Keys become flat file names: ``/`` and ``\\`` turn into ``_`` (``a/b`` and
  ``a_b`` are the same key). Empty keys, NUL, keys starting with ``.`` (hidden
  files, including ``.`` and ``..``) and names over 200 bytes are refused.
* Names starting with ``.dpt`` (the lock file ``.dpt.lock`` and the temp files
  ``.dpt-tmp-*``) are reserved: file tools refuse them, listings hide them with
  every other hidden item.

Every path goes through :class:`~doc_processing_std_tools.containment.Jail`;
every change runs under :func:`~doc_processing_std_tools.locking.exclusive`
with the store's lock file, and every write is atomic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..shared import server_module as wiring
from .files import FileCommands
from .folder import EDIT_ATTEMPTS, MemoryFolder
from .formats import MAX_KEY_FILE_BYTES, MAX_LINES, MemoryStoreError
from .index import MAX_INDEXED_BYTES, EntryIndex
from .keys import KeyValueStore
from .server import create_server, instructions
from .settings import (
    DEFAULT_MEMORY_DIR,
    ENV_MEMORY_DIR,
    LOCKS_ITSELF,
    SERVER_NAME,
    Settings,
    check,
    describe,
    user_memory_dir,
)
from .stores import MemoryStore, SessionStores

if TYPE_CHECKING:
    from fastmcp import FastMCP

    memory_server: FastMCP

__all__ = [
    "DEFAULT_MEMORY_DIR",
    "EDIT_ATTEMPTS",
    "ENV_MEMORY_DIR",
    "LOCKS_ITSELF",
    "MAX_INDEXED_BYTES",
    "MAX_KEY_FILE_BYTES",
    "MAX_LINES",
    "SERVER_NAME",
    "SPEC",
    "EntryIndex",
    "FileCommands",
    "KeyValueStore",
    "MemoryFolder",
    "MemoryStore",
    "MemoryStoreError",
    "SessionStores",
    "Settings",
    "check",
    "create_server",
    "describe",
    "instructions",
    "main",
    "standalone_server",
    "user_memory_dir",
]

# After the imports above: SPEC is read from them (see wiring.ServerModule).
_package = wiring.ServerModule(__name__, SERVER_NAME, export="memory_server")
SPEC = _package.spec
"""The server's :class:`~doc_processing_std_tools.servers.ServerSpec`, registered as
``memory-tools``."""
standalone_server = _package.standalone_server
"""A new FastMCP server running on its own, as ``dpt-memory`` serves it: settings from the
environment (``$DPTTOOLS_MEMORY_DIR``), following the client's MCP roots.

Args:
    args (Sequence[str]): Ignored: memory-tools takes its settings from the environment.
"""
main = _package.main
"""Serve memory-tools over stdio: ``dpt-memory`` / ``python -m doc_processing_std_tools.memory``.

Args:
    argv (Sequence[str] | None): The command-line arguments (none are taken);
        ``sys.argv[1:]`` when ``None``. ``-h`` prints the usage.

Raises:
    SystemExit: 2, with one line on stderr, when the settings are wrong.
"""
__getattr__: Any = _package.module_getattr
