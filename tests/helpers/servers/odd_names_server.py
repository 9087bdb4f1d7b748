"""An MCP server run as its own process whose tool names the MCP spec allows but not every client.

``python odd_names_server.py``: ``get.issue`` (a dot), a 100-character name, and ``list_issues``
(a name every client takes). With ``--collide`` also ``get_issue``, the name ``get.issue``
becomes once mapped for clients. With ``--later`` it starts with ``list_issues`` and ``grow``
only; calling ``grow`` adds the other two and sends ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import sys

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.tools import Tool

LONG = "summarize_" + "the_pull_request_review_comments_" * 2 + "and_suggestions_x"
LONG = (LONG + "y" * 100)[:100]
ODD = ("get.issue", LONG)
server = FastMCP("odd")


def _tool(name: str) -> Tool:
    def run(number: int = 1) -> dict[str, object]:
        return {"tool": name, "number": number}

    return Tool.from_function(run, name=name, description=f"The tool the server calls {name}.")


async def grow(ctx: Context) -> str:
    """Add the tools with odd names and say the tool list changed."""
    for name in ODD:
        server.add_tool(_tool(name))
    await ctx.send_notification(mcp_types.ToolListChangedNotification())
    return "grown"


later = "--later" in sys.argv
for _name in (*(() if later else ODD), "list_issues", *(["get_issue"] * ("--collide" in sys.argv))):
    server.add_tool(_tool(_name))
if later:
    server.add_tool(Tool.from_function(grow))

if __name__ == "__main__":
    server.run(show_banner=False)
