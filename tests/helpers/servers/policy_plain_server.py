"""An in-process server for tests/launcher/calls/test_call_policy_paths.py (``helpers.servers.policy_plain_server:create``).

Its tools offer a plain call as popoto-memory's do (``popoto_memory/tools.py`` ``PopotoTool.plain_call``;
``launcher/external/relay_targets.py`` ``PLAIN_CALL``), and the server behaves as a default FastMCP:
over stdio the launcher's fast path calls them directly; over HTTP they go through fastmcp.

Tools: ``slow`` (writes *started*, then waits a minute), ``change`` (changes state: the launcher
holds the process lock for it), ``hold`` (changes state: writes *started* once it runs, under the
process lock, then waits until *release* exists) and ``ready``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from fastmcp import FastMCP
from fastmcp.tools.base import Tool, ToolResult
from mcp.types import TextContent, ToolAnnotations
from pydantic import PrivateAttr

HOLD_LIMIT = 60.0  # seconds a hold lasts at most, released or not


async def _slow(arguments: dict[str, Any]) -> str:
    Path(arguments["started"]).write_text("started")
    await anyio.sleep(60)
    return "slept"


async def _change(arguments: dict[str, Any]) -> str:
    return "changed"


async def _hold(arguments: dict[str, Any]) -> str:
    Path(arguments["started"]).write_text("holding")
    with anyio.move_on_after(HOLD_LIMIT):
        while not Path(arguments["release"]).exists():
            await anyio.sleep(0.01)
    return "released"


async def _ready(arguments: dict[str, Any]) -> str:
    return "ready"


async def _secret(arguments: dict[str, Any]) -> str:  # (the tests' access: rules deny it)
    return "secret"


class PlainTool(Tool):
    """A tool answering one text block, with the plain call the stdio fast path uses."""

    _body: Callable[[dict[str, Any]], Awaitable[str]] | None = PrivateAttr(default=None)

    def __init__(self, body: Callable[[dict[str, Any]], Awaitable[str]], **fields: Any) -> None:
        super().__init__(**fields)
        self._body = body

    async def answer(self, arguments: dict[str, Any]) -> tuple[str, bool]:
        assert self._body is not None
        return await self._body(arguments or {}), False

    @property
    def plain_call(self) -> Callable[[dict[str, Any]], Awaitable[tuple[str, bool]]]:
        return self.answer

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        text, is_error = await self.answer(arguments)
        return ToolResult(content=[TextContent(type="text", text=text)], is_error=is_error)


def _schema(*names: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in names},
        "required": list(names),
    }


def create() -> FastMCP:
    server = FastMCP("policy-plain")
    tools = [
        ("slow", _slow, _schema("started"), True),
        ("change", _change, _schema(), False),
        ("hold", _hold, _schema("started", "release"), False),
        ("ready", _ready, _schema(), True),
        ("secret", _secret, _schema(), True),
    ]
    for name, body, parameters, read_only in tools:
        server.add_tool(
            PlainTool(
                body,
                name=name,
                description=f"{name} (a test tool)",
                parameters=parameters,
                annotations=ToolAnnotations(readOnlyHint=read_only),
            )
        )
    return server
