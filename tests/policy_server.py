"""An external MCP server for tests/test_call_policy_paths.py, run as its own process.

``python policy_server.py [--down-file PATH]`` serves stdio (a ``command:`` server);
``python policy_server.py --listen-fd FD`` serves streamable HTTP on a listening socket the test
holds and hands down (a ``url:`` server): the port stays open while no process serves it, so a
launcher reconnecting meanwhile waits instead of being refused, and a new process takes over.

It never writes to stderr: the launcher quotes an external server's last stderr line when it
goes down, and what a client reads must not depend on whether the server had a stderr.

Tools: ``slow`` (writes *started*, then waits a minute: a call cut short or cancelled),
``change`` (changes state: the launcher holds the process lock for it), ``crash`` and ``die``
(the process kills itself mid-call: the first for the crash cells, the second to take the
server down before a refusal), ``ready`` (answers at once).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import time
from pathlib import Path

import anyio
from fastmcp import FastMCP

DOWN_WAIT = 120.0  # seconds a server started while its down file exists waits at most

server = FastMCP("policy")
READ_ONLY = {"readOnlyHint": True}


@server.tool(annotations=READ_ONLY)
async def slow(started: str) -> str:
    Path(started).write_text("started")
    await anyio.sleep(60)
    return "slept"


@server.tool
def change() -> str:
    return "changed"


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--down-file", type=Path)
    parser.add_argument("--listen-fd", type=int)
    args = parser.parse_args()
    if args.down_file is not None:
        deadline = time.monotonic() + DOWN_WAIT
        while args.down_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)  # (the launcher's initialize waits meanwhile: it is restarting)
    if args.listen_fd is None:
        server.run(show_banner=False, log_level="CRITICAL")
        return
    listener = socket.socket(fileno=args.listen_fd)
    server.run(
        transport="http",
        show_banner=False,
        log_level="CRITICAL",
        sockets=[listener],
        host="127.0.0.1",
        port=listener.getsockname()[1],
    )


if __name__ == "__main__":
    main()
