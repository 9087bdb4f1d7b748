"""Every fastmcp / mcp detail the launcher relies on beyond their documented API, in one place.

``tests/test_seams.py`` pins each behaviour used here, so a fastmcp upgrade that
changes one of them fails that test rather than the launcher. Keep this module
small: anything that works through public API belongs elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.providers import Provider
    from fastmcp.tools import Tool
    from mcp.server.lowlevel import Server


def lifespan_manager(server: FastMCP) -> AbstractAsyncContextManager[Any]:
    """Runs the server's lifespan and every mounted provider's (``FastMCP._lifespan_manager``)."""
    return server._lifespan_manager()


def low_level_server(server: FastMCP) -> Server[Any, Any]:
    """The mcp SDK server that speaks the protocol for *server* (``FastMCP._mcp_server``)."""
    return server._mcp_server


def mounted_provider(
    server: FastMCP, namespace: str | None, needs_lock: Callable[[Tool], bool]
) -> Provider:
    """*server* as ``FastMCP.mount`` would add it, with the process lock around some tools.

    The server is mounted whole (its middleware, error masking and lifespan all
    apply, exactly as when it runs alone). Tools for which *needs_lock* is true
    hold :data:`locking.PROCESS_LOCK` while they run. The lock wraps the tool
    object itself, so a tool the server adds after start is covered by the same
    rule; no table of names can go stale.
    """
    from fastmcp.server.providers.fastmcp_provider import FastMCPProvider
    from fastmcp.server.transforms import Namespace

    provider: Provider = FastMCPProvider(server).wrap_transform(_lock_transform(needs_lock))
    if namespace:
        provider = provider.wrap_transform(Namespace(namespace))
    return provider


def _lock_transform(needs_lock: Callable[[Tool], bool]) -> Any:
    from fastmcp.server.transforms import Transform

    locked_tool = _locked_tool_class()

    def wrap(tool: Tool) -> Tool:
        return locked_tool.wrap(tool) if needs_lock(tool) else tool

    class ProcessLockTransform(Transform):
        async def list_tools(self, tools: Sequence[Tool]) -> Sequence[Tool]:
            return [wrap(tool) for tool in tools]

        async def get_tool(self, name: str, call_next: Any, *, version: Any = None) -> Tool | None:
            tool = await call_next(name, version=version)
            return wrap(tool) if tool is not None else None

    return ProcessLockTransform()


_LOCKED_TOOL: type | None = None


def _locked_tool_class() -> Any:
    """``Tool`` subclass whose ``_run`` (the server's entry point) holds the process lock."""
    global _LOCKED_TOOL
    if _LOCKED_TOOL is not None:
        return _LOCKED_TOOL
    from fastmcp.tools import Tool

    from ..locking import hold_async

    class LockedTool(Tool):
        _inner: Any = None

        @classmethod
        def wrap(cls, tool: Tool) -> LockedTool:
            fields = {name: getattr(tool, name) for name in Tool.model_fields}
            locked = cls(**fields)
            locked._inner = tool
            return locked

        async def _run(self, arguments: dict[str, Any]) -> Any:
            async with hold_async():
                return await self._inner._run(arguments)

        async def run(self, arguments: dict[str, Any]) -> Any:
            async with hold_async():
                return await self._inner.run(arguments)

    _LOCKED_TOOL = LockedTool
    return LockedTool
