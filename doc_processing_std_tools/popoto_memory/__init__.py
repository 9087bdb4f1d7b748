"""``popoto-memory``: popoto's four harness-memory tools, served in-process by FastMCP.

The tools (``memory_search``, ``memory_save``, ``memory_feedback``,
``memory_status``) are exactly popoto's: names, descriptions and input schemas
come from ``popoto.integrations.mcp_server.tool_definitions()`` and every call
goes to its ``dispatch()`` (on the event loop as popoto's own server does when
the store is on this machine, else in a worker thread: :mod:`.calls`), with
popoto's text and ``is_error`` passed through. What this package adds:

* **Settings** that map onto popoto's ``POPOTO_MEMORY_*`` environment
  (``MemoryConfig.from_env``); the settings win, every variable they do not
  cover keeps working as popoto documents it.
* **Backends**: ``embedded`` (default: a private ``redis-server`` in a per-user
  data folder, shared by every launcher that uses that folder and stopped when
  the last one exits, see :mod:`doc_processing_std_tools.embedded_redis`),
  ``redis`` (your Redis/Valkey, ``url``) and ``postgres`` (passed through to
  popoto; PostgreSQL 18+ only).
* **Visible failure**: popoto answers an unreachable backend with empty search
  results; here ``memory_search``/``memory_save``/``memory_feedback`` first ping
  the backend and return an error naming the backend and the fix.
* **Locking**: ``memory_save`` and ``memory_feedback`` run under
  :data:`doc_processing_std_tools.locking.PROCESS_LOCK`.

Modules: :mod:`.settings` (settings and the environment, which backend),
:mod:`.checks` (``--check``), :mod:`.runtime` (starting the backend),
:mod:`.calls` (one call: refusals, popoto's dispatch, outages), :mod:`.server`
(the MCP wiring).

Sharing the embedded store with popoto's own hooks (``popoto-memory hook``, run
by the harness as separate processes): give the server a fixed ``port`` and an
``agent_id``, then set for the hooks
``POPOTO_MEMORY_URL=redis://:$(cat <data_dir>/password)@127.0.0.1:<port>/1`` and
the same ``POPOTO_MEMORY_AGENT_ID``. The password is created once (mode 0600)
and reused across restarts; the store is only up while a launcher uses it.

popoto keeps one global Redis connection per process, so only one
``popoto-memory`` server may run in a process (``ONE_PER_PROCESS``; a second
lifespan entered while one runs is refused with :class:`PopotoUnavailable`). popoto itself is imported only
inside functions, so importing this package works without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..shared import server_module as wiring
from .calls import MAX_SAVE_CHARS, MAX_SAVE_RUN, CallResult, oversized_save
from .checks import check, describe, installed_popoto_version
from .runtime import IMPORT_DELAY, START_TIMEOUT, PopotoUnavailable, Runtime
from .server import create_server, popoto_definitions, runtime_of
from .settings import (
    EXTRA,
    LOCKS_ITSELF,
    MISSING_POPOTO,
    ONE_PER_PROCESS,
    SERVER_NAME,
    Resolved,
    Settings,
    default_data_dir,
    resolve,
)

if TYPE_CHECKING:
    from fastmcp import FastMCP

    popoto_memory_server: FastMCP

__all__ = [
    "EXTRA",
    "IMPORT_DELAY",
    "LOCKS_ITSELF",
    "MAX_SAVE_CHARS",
    "MAX_SAVE_RUN",
    "MISSING_POPOTO",
    "ONE_PER_PROCESS",
    "SERVER_NAME",
    "SPEC",
    "START_TIMEOUT",
    "CallResult",
    "PopotoUnavailable",
    "Resolved",
    "Runtime",
    "Settings",
    "check",
    "create_server",
    "default_data_dir",
    "describe",
    "installed_popoto_version",
    "main",
    "oversized_save",
    "popoto_definitions",
    "resolve",
    "runtime_of",
    "standalone_server",
]

# After the imports above: SPEC is read from them (see wiring.ServerModule).
_package = wiring.ServerModule(
    __name__, SERVER_NAME, export="popoto_memory_server", follow_client_roots=False
)
SPEC = _package.spec
"""The server's :class:`~doc_processing_std_tools.servers.ServerSpec`, registered as
``popoto-memory``."""
standalone_server = _package.standalone_server
"""A new FastMCP server running on its own, as ``dpt-popoto-memory`` serves it: settings from
popoto's environment (``POPOTO_MEMORY_*``).

Args:
    args (Sequence[str]): Ignored: popoto-memory takes its settings from the environment.
"""
main = _package.main
"""Serve popoto-memory over stdio: ``dpt-popoto-memory`` /
``python -m doc_processing_std_tools.popoto_memory``.

Args:
    argv (Sequence[str] | None): The command-line arguments (none are taken);
        ``sys.argv[1:]`` when ``None``. ``-h`` prints the usage.

Raises:
    SystemExit: 2, with one line on stderr, when the settings are wrong.
"""
__getattr__: Any = _package.module_getattr
