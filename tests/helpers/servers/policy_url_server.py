"""An MCP server over streamable HTTP for tests/launcher/calls/test_call_policy_paths.py (a ``url:`` server).

``python policy_url_server.py FD`` serves on a listening socket the test holds and hands down:
the port stays open while no process serves it, so a launcher reconnecting meanwhile waits in
its backlog instead of being refused, and a new process takes over the same port.

The tools of ``tests/helpers/servers/policy_server.py`` (its stdio twin), with fastmcp. It writes nothing to
stderr either.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import anyio
from fastmcp import FastMCP

server = FastMCP("policy")
READ_ONLY = {"readOnlyHint": True}


@server.tool(annotations=READ_ONLY)
async def slow(started: str) -> str:
    Path(started).write_text("started")
    await anyio.sleep(60)
    return "slept"


@server.tool
def change() -> str:
    return "change"


@server.tool(annotations=READ_ONLY)
def crash() -> str:
    os.kill(os.getpid(), signal.SIGKILL)
    return "not reached"


@server.tool(annotations=READ_ONLY)
def die() -> str:
    os.kill(os.getpid(), signal.SIGKILL)
    return "not reached"


@server.tool(annotations=READ_ONLY)
def ready() -> str:
    return "ready"


@server.tool(annotations=READ_ONLY)
def secret() -> str:  # (the tests' access: rules deny it)
    return "secret"


if __name__ == "__main__":
    listener = socket.socket(fileno=int(sys.argv[1]))
    server.run(
        transport="http",
        show_banner=False,
        log_level="CRITICAL",
        sockets=[listener],
        host="127.0.0.1",
        port=listener.getsockname()[1],
    )
