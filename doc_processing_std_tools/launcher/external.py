"""External MCP servers (a ``command`` or a ``url``), proxied with one long-lived session each.

The session is opened at launch and kept for every call (never a process or an
HTTP session per request), and closed when the launcher stops. A child's stderr
reaches the launcher's stderr line by line, prefixed with its mount name; its
stdout carries only the protocol.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .config import ServerEntry

if TYPE_CHECKING:
    from fastmcp import FastMCP

START_TIMEOUT = 30.0  # seconds for a child to start and answer, or a URL to answer


class ExternalStartError(Exception):
    """An external server could not be started or reached; the message says which and why."""


class StderrRelay:
    """A pipe whose lines are copied to our stderr as ``[name] line`` by a daemon thread."""

    def __init__(self, name: str) -> None:
        read_fd, write_fd = os.pipe()
        self.file: TextIO = os.fdopen(write_fd, "w")
        self.last_line = ""
        threading.Thread(
            target=self._pump, args=(name, read_fd), name=f"stderr of {name}", daemon=True
        ).start()

    def _pump(self, name: str, read_fd: int) -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            for raw in pipe:
                line = raw.decode("utf-8", "replace").rstrip()
                if line:
                    self.last_line = line[:500]
                    print(f"[{name}] {line}", file=sys.stderr, flush=True)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()


def _transport(name: str, entry: ServerEntry, base_dir: Path) -> tuple[Any, StderrRelay | None]:
    if entry.command:
        from fastmcp.client.transports import StdioTransport

        relay = StderrRelay(name)
        cwd = str((base_dir / entry.cwd).resolve()) if entry.cwd else None
        transport = StdioTransport(
            entry.command,
            list(entry.args),
            env={**os.environ, **entry.env},
            cwd=cwd,
            keep_alive=True,
            log_file=relay.file,
        )
        return transport, relay
    assert entry.url
    headers = dict(entry.headers)
    if entry.url.rstrip("/").endswith("/sse"):
        from fastmcp.client.transports import SSETransport

        return SSETransport(entry.url, headers=headers), None
    from fastmcp.client.transports import StreamableHttpTransport

    return StreamableHttpTransport(entry.url, headers=headers), None


async def open_external(
    name: str, entry: ServerEntry, base_dir: Path, stack: AsyncExitStack
) -> FastMCP:
    """Start or reach the server, and return a proxy server on its one session.

    The session closes when *stack* does. Raises :class:`ExternalStartError`.
    """
    import anyio
    from fastmcp import Client
    from fastmcp.server import create_proxy

    transport, relay = _transport(name, entry, base_dir)
    if relay is not None:
        stack.callback(relay.close)
    # mode="legacy": the handshake era every MCP server speaks (notes: fastmcp-4-and-mcp-2.md Q2).
    client = Client(transport, mode="legacy")
    what = f"command {entry.command!r}" if entry.command else f"URL {entry.url}"
    try:
        with anyio.fail_after(START_TIMEOUT):
            await stack.enter_async_context(client)
    except TimeoutError:
        raise ExternalStartError(f"{what} did not answer within {START_TIMEOUT:g} s") from None
    except Exception as exc:
        detail = (relay.last_line if relay else "") or f"{type(exc).__name__}: {exc}"
        raise ExternalStartError(f"{what} failed to start: {detail[:300]}") from None
    # A connected plain Client is reused for every request (one session per entry).
    return create_proxy(client, name=name)
