"""An MCP session belongs to the endpoint that opened it.

Every profile is served by the same SDK session manager (``transports/http.py``), so without
this a session opened at ``/mcp/restricted`` could be used at ``/mcp`` to call a tool that
profile leaves out (issue #35). :class:`SessionEndpoints` remembers, from the
``mcp-session-id`` header of each new session's first reply, the profile whose endpoint opened
it, and answers a request that brings the session to another endpoint with 404 and one line,
as the SDK answers a session it does not know.
"""

from __future__ import annotations

import json
from collections import OrderedDict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PROFILE_SCOPE_KEY = "dpt.profile"  # set by ProfileTag, read by compose/profile_gate.py
SESSION_HEADER = b"mcp-session-id"
MAX_REMEMBERED = 100_000  # sessions remembered at once (the oldest forgotten first)


class SessionEndpoints:
    """The MCP endpoint, refusing a session that another endpoint opened."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._opened_at: OrderedDict[bytes, str] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        here = str(scope.get(PROFILE_SCOPE_KEY) or "")
        session = next((v for k, v in scope["headers"] if k == SESSION_HEADER), None)
        if session is not None:
            opened = self._opened_at.get(session)
            if opened is not None and opened != here:
                await _refuse(send, scope, opened)
                return
            await self.app(scope, receive, send)
            return

        async def remember(message: Message) -> None:
            if message["type"] == "http.response.start":
                new = next((v for k, v in message.get("headers", []) if k == SESSION_HEADER), None)
                if new is not None:
                    self._opened_at[new] = here
                    if len(self._opened_at) > MAX_REMEMBERED:
                        self._opened_at.popitem(last=False)
            await send(message)

        await self.app(scope, receive, remember)


async def _refuse(send: Send, scope: Scope, opened: str) -> None:
    path = str(scope.get("path", ""))
    where = f"the {opened!r} profile's endpoint" if opened else "the plain endpoint"
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": f"this session was opened at {where}, not at {path}: "
                "use that endpoint, or open a new session here",
            },
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 404,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
