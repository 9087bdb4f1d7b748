"""An OAuth-protected MCP server with its own authorization server, for the upstream OAuth tests.

Run as ``python tests/helpers/servers/oauth_server.py PORT_FILE [TOKEN_SECONDS]``: it binds 127.0.0.1 on a
free port, writes the port to PORT_FILE and serves until killed. fastmcp's
``InMemoryOAuthProvider`` is the authorization server (metadata, dynamic client
registration, an authorize endpoint that approves at once, tokens, refresh); ``/mcp`` is
the MCP server, whose ``whoami`` tool answers ``hello`` and records the access token the
call carried; its read-only ``meet`` tool answers ``met`` once *together* calls of a group
were in flight at once (``alone`` after 5 s). Test hooks:

- ``GET /admin/log``: ``{"calls": [token, ...], "grants": [{"grant_type", "resource"}, ...],
  "tagged": [{"tag", "token"}, ...]}``: ``tagged`` pairs each call's ``tag`` argument (the
  caller's name for the call) with the token it carried.
- ``POST /admin/expire``: every access token issued so far has expired (refresh tokens work).
- ``POST /admin/revoke``: every access and refresh token issued so far stops working.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

CALLS: list[str] = []
TAGGED: list[dict[str, str]] = []
IN_FLIGHT: dict[str, int] = {}  # meet's calls now running, by group
MET: set[str] = set()  # the groups whose calls were all in flight at once
GRANTS: list[dict[str, Any]] = []


def build(base_url: str, token_seconds: int) -> Any:
    from fastmcp import FastMCP
    from fastmcp.server.auth.providers import in_memory
    from fastmcp.server.dependencies import get_access_token
    from mcp.server.auth.settings import ClientRegistrationOptions
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    in_memory.DEFAULT_ACCESS_TOKEN_EXPIRY_SECONDS = token_seconds

    class Provider(in_memory.InMemoryOAuthProvider):
        """An expired access token is refused without revoking its refresh token (the in-memory
        provider would: a real one lets the client refresh)."""

        async def load_access_token(self, token: str) -> Any:
            found = self.access_tokens.get(token)
            if found is None or (found.expires_at is not None and found.expires_at < time.time()):
                return None
            return found

    provider = Provider(
        base_url=base_url,
        client_registration_options=ClientRegistrationOptions(enabled=True),
    )
    mcp = FastMCP("protected", auth=provider)

    @mcp.tool
    def whoami(tag: str = "") -> str:
        """Say hello; the call's access token is recorded (with *tag*)."""
        token = get_access_token()
        CALLS.append(token.token if token else "")
        TAGGED.append({"tag": tag, "token": CALLS[-1]})
        return "hello"

    @mcp.tool(annotations={"readOnlyHint": True})
    async def meet(tag: str, together: int) -> str:
        """Wait until *together* calls tagged GROUP-... are running at once (a session that
        sends one call at a time never gets there); the token is recorded as by whoami."""
        import anyio

        token = get_access_token()
        TAGGED.append({"tag": tag, "token": token.token if token else ""})
        group = tag.rsplit("-", 1)[0]
        IN_FLIGHT[group] = IN_FLIGHT.get(group, 0) + 1
        try:
            with anyio.move_on_after(5):
                while group not in MET:
                    if IN_FLIGHT[group] >= together:
                        MET.add(group)
                    await anyio.sleep(0.01)
        finally:
            IN_FLIGHT[group] -= 1
        return "met" if group in MET else "alone"

    @mcp.custom_route("/admin/log", methods=["GET"])
    async def admin_log(_request: Request) -> Response:
        return JSONResponse({"calls": CALLS, "grants": GRANTS, "tagged": TAGGED})

    @mcp.custom_route("/admin/revoke", methods=["POST"])
    async def admin_revoke(_request: Request) -> Response:
        provider.access_tokens.clear()
        provider.refresh_tokens.clear()
        return JSONResponse({"revoked": True})

    @mcp.custom_route("/admin/expire", methods=["POST"])
    async def admin_expire(_request: Request) -> Response:
        for token in provider.access_tokens.values():
            token.expires_at = 1
        return JSONResponse({"expired": True})

    app = mcp.http_app(path="/mcp")

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        """Note each token request's grant type and RFC 8707 resource, then pass it on."""
        if scope["type"] != "http" or scope["path"] != "/token":
            await app(scope, receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        form = parse_qs(body.decode())
        GRANTS.append(
            {
                "grant_type": form.get("grant_type", [""])[0],
                "resource": form.get("resource", [None])[0],
            }
        )
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return recording


def main(port_file: str, token_seconds: int) -> None:
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = build(f"http://127.0.0.1:{port}", token_seconds)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    Path(port_file).write_text(json.dumps({"port": port}))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3600)
