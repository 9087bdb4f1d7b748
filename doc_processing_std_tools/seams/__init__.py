"""Every fastmcp, mcp and anyio detail the launcher relies on beyond their documented API, one
module per upstream surface:

- ``fastmcp_server``: a FastMCP server's lifespan, SDK server, providers, the request it serves;
- ``fastmcp_tools``: the tool objects a server stores, and a tool's entry point (``RunsAround``);
- ``client_sessions``: raw requests on the SDK's client sessions, their callbacks and pending replies;
- ``server_sessions``: the connection a server session belongs to, and its request gate;
- ``http_sessions``: the SDK's streamable HTTP session manager and its HTTP client;
- ``session_reads``: a ``url:`` server's messages, seen before the SDK's client session reads them;
- ``stdio_children``: an MCP server process as the SDK's stdio client starts and stops it;
- ``oauth_client``: the SDK's OAuth client provider, changed for long-lived sessions;

A leaf: imports nothing else of this package (an import-linter contract in pyproject.toml says
so). Each behaviour used here is pinned by a test in ``tests/seams/`` that exercises it, so a
fastmcp or mcp upgrade that changes one fails there. Code that works through public API (a
transform, a logging filter, the call rules) lives with its layer, not here.
"""
