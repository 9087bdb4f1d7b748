"""An MCP server that asks its client for things: sampling (with tools too), elicitation, roots, logs.

``python asking_server.py`` serves stdio. Run alone or mounted by the launcher, its
tools show what its client answered (or the error it got), so a test compares both.
It asks for roots right after the handshake and again on every
``notifications/roots/list_changed``; ``roots_seen`` tells what those asks got.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.server.middleware import Middleware
from mcp.shared.exceptions import MCPError

warnings.simplefilter("ignore")  # the SDK marks server-initiated requests deprecated
seen_roots: list[str] = []
_tasks: set[asyncio.Task[None]] = set()


async def _ask_roots(session: Any) -> None:
    try:
        result = await session.list_roots()
        seen_roots.append(",".join(str(root.uri) for root in result.roots))
    except MCPError as exc:
        seen_roots.append(f"error {exc.error.code}: {exc.error.message}")


class AsksForRoots(Middleware):
    """Asks for roots after ``initialized`` and on ``roots/list_changed``, as many servers do."""

    async def on_notification(self, context: Any, call_next: Any) -> Any:
        result = await call_next(context)
        if context.method in ("notifications/initialized", "notifications/roots/list_changed"):
            task = asyncio.create_task(_ask_roots(context.fastmcp_context.session))
            _tasks.add(task)
            task.add_done_callback(_tasks.discard)
        return result


server = FastMCP("asker", middleware=[AsksForRoots()])


@server.tool
async def sample(prompt: str, ctx: Context) -> str:
    """The client's model's answer to *prompt*, or the error the client gave."""
    message = mcp_types.SamplingMessage(
        role="user", content=mcp_types.TextContent(type="text", text=prompt)
    )
    try:
        result = await ctx.session.create_message(messages=[message], max_tokens=20)
    except MCPError as exc:
        return f"error {exc.error.code}: {exc.error.message}"
    return f"{result.model}: {getattr(result.content, 'text', '')}"


@server.tool
async def sample_with_tools(prompt: str, ctx: Context) -> str:
    """Sampling that offers the client's model a tool: which tool it chose, with what input."""
    message = mcp_types.SamplingMessage(
        role="user", content=mcp_types.TextContent(type="text", text=prompt)
    )
    lookup = mcp_types.Tool(
        name="lookup",
        description="Look a word up",
        input_schema={"type": "object", "properties": {"word": {"type": "string"}}},
    )
    try:
        result = await ctx.session.create_message(
            messages=[message],
            max_tokens=20,
            tools=[lookup],
            tool_choice=mcp_types.ToolChoice(mode="required"),
        )
    except MCPError as exc:
        return f"error {exc.error.code}: {exc.error.message}"
    blocks = result.content if isinstance(result.content, list) else [result.content]
    used = [f"{b.name}({b.input})" for b in blocks if isinstance(b, mcp_types.ToolUseContent)]
    return f"{result.stop_reason}: {','.join(used)}"


@server.tool
async def ask_name(ctx: Context) -> str:
    """What the user answered when asked for a name."""
    try:
        answer = await ctx.elicit("Your name?", str)
    except MCPError as exc:
        return f"error {exc.error.code}: {exc.error.message}"
    return f"{answer.action}: {getattr(answer, 'data', '')}"


@server.tool
async def roots(ctx: Context) -> str:
    """The client's roots, as it lists them now."""
    try:
        result = await ctx.session.list_roots()
    except MCPError as exc:
        return f"error {exc.error.code}: {exc.error.message}"
    return ",".join(str(root.uri) for root in result.roots)


@server.tool
def roots_seen() -> list[str]:
    """What each ask for roots outside a call got, in order."""
    return seen_roots


@server.tool
def client_capabilities(ctx: Context) -> dict[str, Any]:
    """The capabilities this server's client declared."""
    declared = ctx.session.client_capabilities
    return declared.model_dump(by_alias=True, exclude_none=True) if declared else {}


@server.tool
async def chatter(text: str, ctx: Context) -> str:
    """Logs *text* at debug, then at info (logger ``chat``)."""
    await ctx.debug(f"debug {text}", logger_name="chat")
    await ctx.info(f"info {text}", logger_name="chat")
    return "said"


if __name__ == "__main__":
    server.run(show_banner=False)
