"""An MCP server over stdio (raw JSON lines) that reports what its client told it, for the
differential tests: what a server sees directly and what it sees mounted in ``dpt-launch``.

Tools:

- ``seen``: what this session received (``what``: one of these only): the ``clientInfo``
  and ``capabilities`` (names) of ``initialize``, the ``levels`` of ``logging/setLevel``, the
  ``notifications`` (methods); ``pid``: this process's id (asked only by name);
- ``custom``: sends ``notifications/probe/custom`` (a method no MCP client knows) first;
- ``overlong``: answers with one line of ``$PROBE_OVERLONG_BYTES`` bytes (a reply with its id).

It declares ``logging``, and answers ``logging/setLevel`` after a log message at each level
at or above the one set (as a server that honours the level would).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
TOOLS = ["seen", "custom", "overlong"]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def main() -> None:
    seen: dict[str, Any] = {"levels": [], "notifications": []}
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method is None:
            continue  # (a reply to a request of ours: none are sent)
        if request_id is None:
            seen["notifications"].append(method)
            continue
        result: dict[str, Any] | None = {}
        if method == "initialize":
            seen["clientInfo"] = params.get("clientInfo")
            seen["capabilities"] = sorted(params.get("capabilities") or {})
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": "probe", "version": "1.0.0"},
            }
        elif method == "tools/list":
            result = {
                "tools": [
                    {
                        "name": name,
                        "description": f"probe: {name}",
                        "inputSchema": {"type": "object"},
                    }
                    for name in TOOLS
                ]
            }
        elif method == "logging/setLevel":
            level = params.get("level")
            seen["levels"].append(level)
            for at in LEVELS[LEVELS.index(level) if level in LEVELS else 0 :]:
                send(
                    {
                        "method": "notifications/message",
                        "params": {"level": at, "data": f"{at} message"},
                    }
                )
        elif method == "tools/call":
            name = params.get("name")
            if name == "seen":
                what = (params.get("arguments") or {}).get("what")
                found = os.getpid() if what == "pid" else seen.get(what) if what else seen
                result = text(json.dumps(found, sort_keys=True))
            elif name == "custom":
                send({"method": "notifications/probe/custom", "params": {"n": 1}})
                result = text("sent notifications/probe/custom")
            elif name == "overlong":
                size = int(os.environ.get("PROBE_OVERLONG_BYTES", "1048576"))
                head = f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"result":{{"content":[{{"type":"text","text":"'
                sys.stdout.write(head)
                left = max(0, size - len(head))
                chunk = "x" * (1 << 20)
                while left > 0:
                    sys.stdout.write(chunk[: min(left, len(chunk))])
                    left -= len(chunk)
                sys.stdout.write('"}]}}\n')
                sys.stdout.flush()
                continue
            else:
                result = None
                send(
                    {
                        "id": request_id,
                        "error": {"code": -32602, "message": f"Unknown tool: {name}"},
                    }
                )
        elif method != "ping":
            result = None
            send(
                {
                    "id": request_id,
                    "error": {"code": -32601, "message": f"Method not found: {method}"},
                }
            )
        if result is not None:
            send({"id": request_id, "result": result})


if __name__ == "__main__":
    main()
