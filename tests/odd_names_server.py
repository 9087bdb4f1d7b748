"""An MCP server run as its own process whose tool names the MCP spec allows but not every client.

``python odd_names_server.py``: ``get.issue`` (a dot), a 100-character name, and ``list_issues``
(a name every client takes). With ``--collide`` also ``get_issue``, the name ``get.issue``
becomes once mapped for clients.
"""

from __future__ import annotations

import sys

from fastmcp import FastMCP
from fastmcp.tools import Tool

LONG = "summarize_" + "the_pull_request_review_comments_" * 2 + "and_suggestions_x"
LONG = (LONG + "y" * 100)[:100]
server = FastMCP("odd")


def _tool(name: str) -> Tool:
    def run(number: int = 1) -> dict[str, object]:
        return {"tool": name, "number": number}

    return Tool.from_function(run, name=name, description=f"The tool the server calls {name}.")


for _name in (
    "get.issue",
    LONG,
    "list_issues",
    *(["get_issue"] if "--collide" in sys.argv else []),
):
    server.add_tool(_tool(_name))

if __name__ == "__main__":
    server.run(show_banner=False)
