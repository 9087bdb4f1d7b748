"""fastmcp's tool objects: the ones a server stores, and the entry point its server calls.

Pinned by ``tests/seams/``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Self

from fastmcp import FastMCP
from fastmcp.tools import Tool, ToolResult

# What a call of a tool runs: given the tool's own entry point, await it (or refuse).
Around = Callable[[Callable[[], Awaitable[ToolResult]]], Awaitable[ToolResult]]


def local_tools(server: FastMCP) -> list[Any]:
    """The tool objects registered on *server* itself (``LocalProvider._components``).

    Read synchronously, right after registration; the public ``list_tools`` is async
    and returns the tools after the server's transforms, not the stored objects.
    """
    components = server.local_provider._components
    return [c for c in components.values() if isinstance(c, Tool)]


def retype_tool(tool: Tool, cls: type[Tool]) -> None:
    """Make the stored *tool* an instance of its subclass *cls* in place.

    The server keeps calling the same object (its key, schema and settings unchanged);
    only the methods *cls* overrides change.
    """
    if not issubclass(cls, type(tool)):
        raise TypeError(f"{cls.__name__} is not a subclass of {type(tool).__name__}")
    tool.__class__ = cls


class RunsAround(Tool):
    """A copy of a tool whose every call runs through an *around* function of ours.

    fastmcp's server calls a tool's private ``_run`` (``FastMCP.call_tool``; fastmcp's own
    ``FastMCPProviderTool`` overrides it to reach a mounted server's middleware), and some of
    its paths call the public ``run``: both go through *around*. The copy keeps the tool's
    definition (every model field); made once per tool object, since copying a pydantic model
    per call would be most of a call's own cost.
    """

    _inner: Tool | None = None
    _around: Around | None = None

    @classmethod
    def wrap(cls, tool: Tool, around: Around) -> Self:
        copy = cls(**{name: getattr(tool, name) for name in Tool.model_fields})
        copy._inner, copy._around = tool, around
        return copy

    @property
    def inner(self) -> Tool:
        """The wrapped tool, as its server has it."""
        assert self._inner is not None
        return self._inner

    async def _run(self, arguments: dict[str, Any]) -> ToolResult:
        assert self._inner is not None and self._around is not None
        inner = self._inner
        return await self._around(lambda: inner._run(arguments))

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        assert self._inner is not None and self._around is not None
        inner = self._inner
        return await self._around(lambda: inner.run(arguments))
