"""An MCP server (stdio) whose tools return every part of a result: the launcher must pass each through."""

from __future__ import annotations

from fastmcp import Context, FastMCP
from fastmcp.tools import ToolResult
from mcp.types import TextContent

server = FastMCP("results")


@server.tool(annotations={"readOnlyHint": True})
async def count_to(steps: int, ctx: Context) -> str:
    """Report progress once per step."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
    return "counted"


@server.tool(annotations={"readOnlyHint": True})
def shaped() -> ToolResult:
    """A result with text, structured content and _meta of its own."""
    return ToolResult(
        content=[TextContent(type="text", text="two items")],
        structured_content={"items": ["a", "b"]},
        meta={"source": "external"},
    )


@server.tool(annotations={"readOnlyHint": True})
def fail() -> str:
    raise ValueError("the external tool refused")


@server.tool(annotations={"readOnlyHint": True})
def request_id(ctx: Context) -> str:
    """The JSON-RPC id this call arrived with (the launcher's fast path uses its own)."""
    return str(ctx.request_id)


@server.tool(annotations={"readOnlyHint": True})
def echo(text: str) -> str:
    return text


if __name__ == "__main__":
    server.run(show_banner=False, log_level="WARNING")
