"""popoto-memory in tests: a call through fastmcp's client, and the embedded redis-server's
processes and port as seen from outside."""

from __future__ import annotations

import socket
import time

import anyio
from fastmcp import Client

from doc_processing_std_tools.embedded_redis import pid_alive


async def call(client: Client, name: str, args: dict | None = None) -> tuple[bool, str]:
    """One tool call: (is_error, its one text block)."""
    with anyio.fail_after(20):
        result = await client.call_tool(name, args or {}, raise_on_error=False)
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.is_error, result.content[0].text


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether *pid* ends within *timeout* seconds."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def listening(port: int) -> bool:
    """Whether anything accepts TCP connections on 127.0.0.1:*port*."""
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0
