"""Standard MCP tool servers and the ``dpt-launch`` launcher that composes them.

Importing this package is cheap: the servers (and fastmcp, popoto) load only
when one of the lazy exports below is first touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
APP_NAME = "doc-processing-std-tools"  # the per-user folders' name (data, cache, runtime)

# export name -> module that defines it (as a module-level lazy attribute)
_LAZY_EXPORTS = {
    "memory_server": "doc_processing_std_tools.memory",
    "filesystem_server": "doc_processing_std_tools.filesystem",
    "popoto_memory_server": "doc_processing_std_tools.popoto_memory",
}

__all__ = ["__version__", *_LAZY_EXPORTS]

if TYPE_CHECKING:
    from fastmcp import FastMCP

    memory_server: FastMCP
    filesystem_server: FastMCP
    popoto_memory_server: FastMCP


def __getattr__(name: str) -> Any:
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
