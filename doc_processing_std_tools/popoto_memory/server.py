"""The MCP wiring: popoto's four tools as fastmcp tools, in a provider that runs the backend.

The tools are listed from :mod:`~doc_processing_std_tools.popoto_memory.snapshot` when the
installed popoto is that version, so building the server does not wait for popoto's
import; their calls go to :func:`.calls.call`.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ..servers import ServerLoadError
from .calls import READ_ONLY_TOOLS, call
from .checks import installed_popoto_version
from .runtime import Runtime
from .settings import EXTRA, MISSING_POPOTO, SERVER_NAME, Settings, resolve

if TYPE_CHECKING:
    from fastmcp import FastMCP

_TOOL_CLASS: type | None = None


def _tool_class() -> type:
    """The fastmcp Tool subclass that forwards to :func:`.calls.call` (built once)."""
    global _TOOL_CLASS
    if _TOOL_CLASS is not None:
        return _TOOL_CLASS

    from fastmcp.tools.base import Tool, ToolResult
    from mcp.types import TextContent
    from pydantic import PrivateAttr

    class PopotoTool(Tool):
        """One of popoto's tools, bound to the runtime of its server."""

        _runtime: Any = PrivateAttr(default=None)

        def __init__(self, runtime: Runtime | None = None, **fields: Any) -> None:
            super().__init__(**fields)
            self._runtime = runtime

        async def answer(self, arguments: dict[str, Any]) -> tuple[str, bool]:
            """(text, is_error): what run() answers."""
            result = await call(self._runtime, self.name, arguments or {})
            return result.text, result.is_error

        @property
        def plain_call(self) -> Any:
            """:meth:`answer` for the launcher's stdio fast path, which calls it with no request
            (``launcher/external/relay_targets.py`` ``PLAIN_CALL``); None when the scope follows the
            client's roots: those calls need their session, so they take the SDK path."""
            runtime = self._runtime
            return None if runtime is None or runtime.resolved.agent_follows_roots else self.answer

        async def run(self, arguments: dict[str, Any]) -> ToolResult:
            text, is_error = await self.answer(arguments)
            return ToolResult(content=[TextContent(type="text", text=text)], is_error=is_error)

    _TOOL_CLASS = PopotoTool
    return PopotoTool


def _provider_class() -> type:
    """A fastmcp LocalProvider that starts the backend for the server's lifespan."""
    from fastmcp.server.providers import LocalProvider

    class PopotoProvider(LocalProvider):
        def __init__(self, runtime: Runtime) -> None:
            super().__init__()
            self.runtime = runtime

        @asynccontextmanager
        async def lifespan(self) -> AsyncIterator[None]:
            await self.runtime.start()
            try:
                yield
            finally:
                await self.runtime.stop()

    return PopotoProvider


def popoto_definitions() -> tuple[str, list[dict[str, Any]]]:
    """popoto's (instructions, tool definitions), without importing popoto when possible.

    When the installed popoto is the version :mod:`popoto_snapshot` was taken from
    (and it is the one ``import popoto`` would load), that copy is used and popoto is
    imported later, in the background; otherwise popoto is imported and asked.
    """
    from . import snapshot as popoto_snapshot

    if installed_popoto_version() == popoto_snapshot.POPOTO_VERSION:
        return popoto_snapshot.SERVER_INSTRUCTIONS, copy.deepcopy(popoto_snapshot.TOOL_DEFINITIONS)
    try:
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
    """
    settings = settings if settings is not None else Settings()
    instructions, definitions = popoto_definitions()
    from fastmcp import FastMCP
    from mcp.types import ToolAnnotations

    runtime = Runtime(resolve(settings))
    # The tools live in a provider whose lifespan runs the backend, so the launcher can
    # attach the provider directly (one dispatch layer fewer) and still start it.
    provider = _provider_class()(runtime)
    server = FastMCP(SERVER_NAME, instructions=instructions, providers=[provider])
    tool_cls = _tool_class()
    for definition in definitions:
        name = definition["name"]
        provider.add_tool(
            tool_cls(
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
