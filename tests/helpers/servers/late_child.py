"""An MCP server over stdio (raw JSON lines) that answers ``initialize`` only once a file exists.

``python late_child.py GATE_FILE``: until GATE_FILE exists it answers nothing, so a test
knows for sure that the child has not answered ``initialize`` yet; then it serves one tool,
``echo``. It exits at once when its stdin closes, even while it waits.
"""

from __future__ import annotations

import json
import select
import sys
from pathlib import Path


def reply(request_id: object, result: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()


def main() -> None:
    gate = Path(sys.argv[1])
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            while not gate.exists():
                if select.select([sys.stdin], [], [], 0.02)[0] and not sys.stdin.buffer.peek(1):
                    return  # the launcher closed our stdin: it is done with us
            reply(
                request_id,
                {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "late", "version": "0"},
                },
            )
        elif method == "tools/list":
            schema = {"type": "object", "properties": {"text": {"type": "string"}}}
            reply(request_id, {"tools": [{"name": "echo", "inputSchema": schema}]})
        elif method == "tools/call":
            text = f"echo {message['params'].get('arguments', {}).get('text', '')}"
            reply(request_id, {"content": [{"type": "text", "text": text}], "isError": False})
        elif request_id is not None and method is not None:
            reply(request_id, {})


if __name__ == "__main__":
    main()
