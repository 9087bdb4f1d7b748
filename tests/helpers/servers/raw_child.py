"""An MCP server over stdio written as raw JSON lines, to misbehave in ways the SDK never would.

Its tools answer with a line that is not one valid JSON-RPC message (``two_values``,
``control_character``, ``nan``), or first send the client a request of its own whose id
looks like the launcher's (``asks_first``), or answer with a JSON-RPC error that has data
(``refuses``: server-everything's URL-elicitation error). For the HTTP fast path: ``id_seen`` answers with
the request id it got (the launcher's own ``dpt~N`` on a fast path, the SDK session's integer
on the SDK path), ``logs_first`` sends a log message before its answer, ``hang`` never
answers, ``cancels_seen`` answers with the request ids of the ``notifications/cancelled`` it
got, ``hangs_seen`` with those of the ``hang`` calls it got (both read-only); ``denied`` and ``limited`` answer ``fine`` (for access and rate-limit rules); ``slow``
touches the file ``$RAW_CHILD_MARK`` names, then answers after a second.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

TOOLS = [
    "two_values",
    "control_character",
    "nan",
    "asks_first",
    "refuses",
    "fine",
    "id_seen",
    "logs_first",
    "hang",
    "cancels_seen",
    "hangs_seen",
    "denied",
    "limited",
    "slow",
]
READ_ONLY = {"cancels_seen", "hangs_seen"}
CANCELLED: list[object] = []
HANGING: list[object] = []
REFUSAL = {
    "code": -32042,
    "message": "This request requires browser-based authorization.",
    "data": {"elicitations": [{"mode": "url", "url": "https://example.com", "elicitationId": "e"}]},
}


def send(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def reply(request_id: object, result: dict) -> None:
    send(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}))


def call(request_id: object, name: str) -> None:
    rid = json.dumps(request_id)
    if name == "two_values":
        send(
            f'{{"jsonrpc":"2.0","id":{rid},"result":{{"content":[{{"type":"text","text":"a"}}],'
            '"isError":false}}{"jsonrpc":"2.0","id":999,"result":{}}'
        )
    elif name == "control_character":
        send(
            f'{{"jsonrpc":"2.0","id":{rid},"result":{{"content":[{{"type":"text",'
            '"text":"a\x01b"}],"isError":false}}'
        )
    elif name == "nan":
        send(
            f'{{"jsonrpc":"2.0","id":{rid},"result":{{"content":[{{"type":"text","text":"n"}}],'
            '"structuredContent":{"x":NaN},"isError":false}}'
        )
    elif name == "refuses":
        send(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": REFUSAL}))
    elif name == "asks_first":
        send('{"jsonrpc":"2.0","id":"dpt~1","method":"ping"}')
        answer = json.loads(sys.stdin.readline())
        kind = "result" if "result" in answer else "error"
        text = f"asked, got a {kind} for {answer.get('id')}"
        reply(request_id, {"content": [{"type": "text", "text": text}], "isError": False})
    elif name in ("id_seen", "cancels_seen", "hangs_seen"):
        seen = {"id_seen": request_id, "cancels_seen": CANCELLED, "hangs_seen": HANGING}[name]
        reply(
            request_id, {"content": [{"type": "text", "text": json.dumps(seen)}], "isError": False}
        )
    elif name == "logs_first":
        note = {"level": "warning", "logger": "raw", "data": "before the answer"}
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": note}))
        reply(request_id, {"content": [{"type": "text", "text": "logged"}], "isError": False})
    elif name == "slow":
        Path(os.environ["RAW_CHILD_MARK"]).touch()
        time.sleep(1)
        reply(request_id, {"content": [{"type": "text", "text": "slow done"}], "isError": False})
    elif name == "hang":
        HANGING.append(request_id)
    else:
        reply(request_id, {"content": [{"type": "text", "text": "fine"}], "isError": False})


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            reply(
                request_id,
                {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}, "logging": {}},
                    "serverInfo": {"name": "raw", "version": "0"},
                },
            )
        elif method == "tools/list":
            schema = {"type": "object", "properties": {}}
            tools = [{"name": n, "inputSchema": schema} for n in TOOLS]
            for tool in tools:
                if tool["name"] in READ_ONLY:  # (no process lock: asked while a call hangs)
                    tool["annotations"] = {"readOnlyHint": True}
            reply(request_id, {"tools": tools})
        elif method == "tools/call":
            call(request_id, message["params"]["name"])
        elif method == "notifications/cancelled":
            CANCELLED.append(message["params"].get("requestId"))
        elif method == "ping":
            reply(request_id, {})
        elif request_id is not None and method is not None:
            send(
                json.dumps(
                    {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no"}}
                )
            )


if __name__ == "__main__":
    main()
