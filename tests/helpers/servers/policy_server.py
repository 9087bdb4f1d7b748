"""An external MCP server over stdio for tests/launcher/calls/test_call_policy_paths.py (a ``command:`` server).

Raw JSON lines and the standard library only: it starts in a few hundredths of a second of
CPU, against a second for a fastmcp server, and the test starts it again after each crash.
``--down-file PATH``: while PATH exists at start, it waits before reading anything (the
launcher's initialize waits meanwhile: a server that is restarting stays so).

It never writes to stderr: the launcher quotes an external server's last stderr line when it
goes down, and what a client reads must not depend on whether the server had a stderr.

Tools: ``slow`` (writes *started* and never answers: a call cut short or cancelled),
``change`` (changes state: the launcher holds the process lock for it), ``crash`` and ``die``
(the process kills itself mid-call: the first for the crash cells, the second to take the
server down before a refusal), ``ready`` (answers at once). ``tests/helpers/servers/policy_url_server.py``
serves the same tools over HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

DOWN_WAIT = 120.0  # seconds a server started while its down file exists waits at most
READ_ONLY = {"readOnlyHint": True}
STARTED = {"type": "object", "properties": {"started": {"type": "string"}}, "required": ["started"]}
NONE: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS = [
    {"name": "slow", "inputSchema": STARTED, "annotations": READ_ONLY},
    {"name": "change", "inputSchema": NONE},
    {"name": "crash", "inputSchema": NONE, "annotations": READ_ONLY},
    {"name": "die", "inputSchema": NONE, "annotations": READ_ONLY},
    {"name": "ready", "inputSchema": NONE, "annotations": READ_ONLY},
    {"name": "secret", "inputSchema": NONE, "annotations": READ_ONLY},  # (access: denies it)
]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def text(request_id: Any, said: str) -> None:
    content = [{"type": "text", "text": said}]
    send({"id": request_id, "result": {"content": content, "isError": False}})


def call(request_id: Any, name: str, arguments: dict[str, Any]) -> None:
    if name == "slow":
        Path(arguments["started"]).write_text("started")  # and no answer: it runs on
    elif name in ("crash", "die"):
        os.kill(os.getpid(), signal.SIGKILL)
    elif name in ("change", "ready", "secret"):
        text(request_id, name)
    else:
        send({"id": request_id, "error": {"code": -32602, "message": f"no tool {name!r}"}})


def main() -> None:
    if "--down-file" in sys.argv:
        down = Path(sys.argv[sys.argv.index("--down-file") + 1])
        deadline = time.monotonic() + DOWN_WAIT
        while down.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method == "initialize":
            capabilities: dict[str, Any] = {"tools": {}}
            info = {"name": "policy", "version": "0"}
            version = params["protocolVersion"]
            result = {"protocolVersion": version, "capabilities": capabilities, "serverInfo": info}
            send({"id": request_id, "result": result})
        elif method == "tools/list":
            send({"id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            call(request_id, params["name"], params.get("arguments") or {})
        elif method == "ping":
            send({"id": request_id, "result": {}})
        elif request_id is not None and method is not None:
            send({"id": request_id, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
