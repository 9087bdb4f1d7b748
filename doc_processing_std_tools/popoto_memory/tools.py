"""popoto's tools as fastmcp tools (:class:`PopotoTool`), in a provider whose lifespan runs the
backend (:class:`PopotoProvider`). Imported when the server is built: importing the package must
not load fastmcp."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastmcp.server.providers import LocalProvider
from fastmcp.tools.base import Tool, ToolResult
from mcp.types import TextContent
from pydantic import PrivateAttr

from .calls import call
from .runtime import Runtime


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


class PopotoProvider(LocalProvider):
    """A fastmcp LocalProvider that starts the backend for the server's lifespan."""

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
