"""The MCP wiring: popoto's four tools as fastmcp tools, in a provider that runs the backend.

The tools are listed from :mod:`~doc_processing_std_tools.popoto_memory.snapshot` when the
installed popoto is that version, so building the server does not wait for popoto's
import; their calls go to :func:`.calls.call`.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from ..servers import ServerLoadError
from .calls import READ_ONLY_TOOLS
from .checks import installed_popoto_version
from .runtime import Runtime
from .settings import EXTRA, MISSING_POPOTO, SERVER_NAME, Settings, resolve

if TYPE_CHECKING:
    from fastmcp import FastMCP


def popoto_definitions() -> tuple[str, list[dict[str, Any]]]:
    """popoto's (instructions, tool definitions), without importing popoto when possible.

    When the installed popoto is the version :mod:`popoto_snapshot` was taken from
    (and it is the one ``import popoto`` would load), that copy is used and popoto is
    imported later, in the background; otherwise popoto is imported and asked.
    """
    # (here, not at the top: the snapshot takes 0.1 s to import, and only building needs it)
    from . import snapshot as popoto_snapshot

    if installed_popoto_version() == popoto_snapshot.POPOTO_VERSION:
        return popoto_snapshot.SERVER_INSTRUCTIONS, copy.deepcopy(popoto_snapshot.TOOL_DEFINITIONS)
    try:  # (popoto: the popoto extra, optional, and 0.55 s to import)
        from popoto.integrations.mcp_server import SERVER_INSTRUCTIONS, tool_definitions
    except ImportError as exc:
        if (getattr(exc, "name", None) or "").split(".")[0] in ("popoto", "mcp", "redis"):
            raise ServerLoadError(MISSING_POPOTO, extra=EXTRA) from None
        raise
    return SERVER_INSTRUCTIONS, tool_definitions()


def create_server(settings: Settings | None = None) -> FastMCP:
    """A fresh ``popoto-memory`` FastMCP server for *settings*.

    The embedded redis-server starts (and popoto's connection is bound) in the
    lifespan of the provider holding the tools, and stops when it exits.

    Args:
        settings: The server's settings; ``None``: from the environment.

    Returns:
        A new FastMCP server with popoto's four tools.

    Raises:
        ServerLoadError: popoto is not installed and its definitions are not the bundled
            snapshot's; the message names the extra to install.
    """
    settings = settings if settings is not None else Settings()
    instructions, definitions = popoto_definitions()
    # (here, not at the top: importing the package must not load fastmcp, 0.25 s)
    from fastmcp import FastMCP
    from mcp.types import ToolAnnotations

    from .tools import PopotoProvider, PopotoTool

    runtime = Runtime(resolve(settings))
    # The tools live in a provider whose lifespan runs the backend, so the launcher can
    # attach the provider directly (one dispatch layer fewer) and still start it.
    provider = PopotoProvider(runtime)
    server = FastMCP(SERVER_NAME, instructions=instructions, providers=[provider])
    for definition in definitions:
        name = definition["name"]
        provider.add_tool(
            PopotoTool(
                runtime,
                name=name,
                description=definition["description"],
                parameters=definition["inputSchema"],
                annotations=ToolAnnotations(
                    read_only_hint=name in READ_ONLY_TOOLS,
                    destructive_hint=False,
                    open_world_hint=False,
                ),
            )
        )
    return server


def runtime_of(server: FastMCP) -> Runtime:
    """The popoto runtime behind a server made by :func:`create_server`."""
    for provider in server.providers:
        runtime = getattr(provider, "runtime", None)
        if isinstance(runtime, Runtime):
            return runtime
    raise LookupError(f"{server.name!r} is not a popoto-memory server")
