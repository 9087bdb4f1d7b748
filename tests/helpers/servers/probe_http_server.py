"""An MCP server over streamable HTTP (raw, the standard library's HTTP server) that sends
notifications no MCP client session knows, for the differential tests of a ``url:`` server.

``python probe_http_server.py PORT`` serves ``http://127.0.0.1:PORT/mcp``. One tool,
``custom``: its reply's SSE stream carries ``notifications/probe/custom`` and
``notifications/tasks/status`` first, then the result. No GET stream (405, as the spec
allows); each POST is answered whole.
"""

from __future__ import annotations

import json
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CUSTOM = [
    {"method": "notifications/probe/custom", "params": {"n": 1}},
    {
        "method": "notifications/tasks/status",
        "params": {
            "taskId": "probe-task",
            "status": "working",
            "createdAt": "2026-01-01T00:00:00Z",
            "lastUpdatedAt": "2026-01-01T00:00:00Z",
            "ttl": None,
        },
    },
]


def answer(message: dict[str, Any]) -> dict[str, Any]:
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "probe-http", "version": "1.0.0"},
        }
    if method == "tools/list":
        tool = {"name": "custom", "description": "probe", "inputSchema": {"type": "object"}}
        return {"tools": [tool]}
    if method == "tools/call":
        return {"content": [{"type": "text", "text": "sent notifications/probe/custom"}]}
    return {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # (quiet)
        pass

    def do_GET(self) -> None:
        self._plain(405)

    def do_DELETE(self) -> None:
        self._plain(200)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        message = json.loads(body)
        if "id" not in message or "method" not in message:
            self._plain(202)  # (a notification, or a reply)
            return
        first = []
        if message["method"] == "tools/call":
            first = [{"jsonrpc": "2.0", **note} for note in CUSTOM]
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer(message)}
        events = "".join(f"event: message\ndata: {json.dumps(m)}\n\n" for m in [*first, reply])
        data = events.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        if message["method"] == "initialize":
            self.send_header("Mcp-Session-Id", uuid.uuid4().hex)
        self.end_headers()
        self.wfile.write(data)

    def _plain(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
