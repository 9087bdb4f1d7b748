"""An MCP server over stdio that handles one message at a time, as many simple servers do.

Its ``slow`` tool sleeps synchronously (``seconds``), so a ping sent meanwhile is answered
only after it; ``whoami`` answers its process id; ``flood`` answers a text of ``seconds`` MB.
"""

from __future__ import annotations

import json
import os
import sys
import time


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(request_id: object, value: str) -> None:
    result = {"content": [{"type": "text", "text": value}], "isError": False}
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "serial", "version": "0"},
            }
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            number = {"type": "object", "properties": {"seconds": {"type": "number"}}}
            tools = [
                {"name": "slow", "inputSchema": number},
                {"name": "whoami", "inputSchema": {"type": "object", "properties": {}}},
                {"name": "flood", "inputSchema": number},
            ]
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
        elif method == "tools/call":
            params = message["params"]
            if params["name"] == "slow":
                time.sleep(float(params["arguments"]["seconds"]))
                text(request_id, "done")
            elif params["name"] == "flood":  # a reply of about `seconds` MB on one line
                text(request_id, "x" * int(float(params["arguments"]["seconds"]) * 1e6))
            else:
                text(request_id, str(os.getpid()))
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        elif request_id is not None and method is not None:
            error = {"code": -32601, "message": "no such method"}
            send({"jsonrpc": "2.0", "id": request_id, "error": error})


if __name__ == "__main__":
    main()
