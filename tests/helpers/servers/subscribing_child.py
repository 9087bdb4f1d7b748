"""An MCP server over stdio (raw JSON lines) whose resource can be subscribed to.

fastmcp serves no subscriptions, so this one speaks the protocol itself. It declares
``resources.subscribe`` and lists ``note://a``; tool ``touch`` changes it and sends
``notifications/resources/updated`` for it when subscribed, and answers which URIs were
subscribed then (so a test sees unsubscribe arrive without waiting for silence).
"""

from __future__ import annotations

import json
import sys

subscribed: set[str] = set()


def send(message: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def main() -> None:
    version = 0
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id, params = message.get("method"), message.get("id"), message.get("params")
        result: dict | None = {}
        if method == "initialize":
            result = {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}, "resources": {"subscribe": True}},
                "serverInfo": {"name": "subscribing", "version": "0"},
            }
        elif method == "tools/list":
            result = {"tools": [{"name": "touch", "inputSchema": {"type": "object"}}]}
        elif method == "resources/list":
            result = {"resources": [{"uri": "note://a", "name": "a", "mimeType": "text/plain"}]}
        elif method == "resources/templates/list":
            result = {"resourceTemplates": []}
        elif method == "prompts/list":
            result = {"prompts": []}
        elif method == "resources/read":
            text = f"version {version}"
            result = {"contents": [{"uri": params["uri"], "mimeType": "text/plain", "text": text}]}
        elif method == "resources/subscribe":
            subscribed.add(params["uri"])
        elif method == "resources/unsubscribe":
            subscribed.discard(params["uri"])
        elif method == "tools/call":
            version += 1
            for uri in sorted(subscribed):
                send({"method": "notifications/resources/updated", "params": {"uri": uri}})
            text = "subscribed: " + ",".join(sorted(subscribed))
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        elif request_id is None:
            result = None  # a notification
        if request_id is not None and result is not None:
            send({"id": request_id, "result": result})


if __name__ == "__main__":
    main()
