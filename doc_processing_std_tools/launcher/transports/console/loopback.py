"""The console's MCP client: the daemon's own endpoint over loopback, with the visitor's token.

A call from the console takes exactly the path any client's takes (the Host guard, the token's
verification, the profile and ``access:`` rules, the call policy, the audit line with the
visitor's name), because it is one: a streamable-HTTP session to this daemon's ``/mcp``, opened
for the page that needs it and closed after.
"""

from __future__ import annotations

from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from mcp.types import CallToolResult, Implementation, Tool
from starlette.requests import Request

from .... import __version__

CALL_TIMEOUT = 300.0  # seconds a call from the console may take
CLIENT = Implementation(name="dpt-console", version=__version__)  # (the audit log's "client")


class Loopback:
    """MCP sessions to the daemon serving *request*, as the holder of *token* (None: no auth)."""

    def __init__(self, request: Request, path: str, token: str | None) -> None:
        server = request.scope.get("server") or ("127.0.0.1", 0)
        host, port = server[0], server[1]
        address = f"[{host}]" if ":" in host else host
        headers = {"host": request.headers.get("host", f"{address}:{port}")}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        self.transport = StreamableHttpTransport(f"http://{address}:{port}{path}", headers=headers)

    def client(self) -> Client[Any]:
        return Client(self.transport, client_info=CLIENT, timeout=CALL_TIMEOUT)

    async def tools(self) -> list[Tool]:
        """The tools the visitor may see (the daemon cuts the list per caller)."""
        async with self.client() as client:
            listed: list[Tool] = await client.list_tools()
        return listed

    async def call(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        async with self.client() as client:
            result: CallToolResult = await client.call_tool_mcp(name, arguments)
        return result
