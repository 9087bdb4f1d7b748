"""External MCP servers (a ``command`` or a ``url``), proxied with one long-lived session each.

Each server has a :class:`Supervisor`: a task that opens the session, keeps it for
every call (never a process or an HTTP session per request), notices when it
dies, and opens it again with exponential backoff (1 s doubling to 30 s). While
it is down, the server's tools stay listed and calls to them return an error
saying so. A child's stderr reaches the launcher's stderr line by line, prefixed
with its mount name; its stdout carries only the protocol.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

import anyio

from .config import ServerEntry

if TYPE_CHECKING:
    from fastmcp import Client, FastMCP

    from .child_pipe import ChildPipe

log = logging.getLogger("dpt-launch")

START_TIMEOUT = 30.0  # seconds for a child to start and answer, or a URL to answer
FIRST_BACKOFF, MAX_BACKOFF = 1.0, 30.0
PING_INTERVAL = 2.0  # a live session is pinged this often (a dead child fails at once)
PING_TIMEOUT = 20.0  # a server this slow to answer a ping is taken for hung

State = Literal["starting", "up", "restarting", "failed"]


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
                    self.last_line = line[:300]
                    print(f"[{name}] {line}", file=sys.stderr, flush=True)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()


def _is_connection_loss(exc: BaseException | None) -> bool:
    """Whether an error (or one it was raised from) says the session's connection is gone."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | EOFError):
            return True
        if "Connection closed" in str(exc) and type(exc).__name__ in ("McpError", "MCPError"):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class Supervisor:
    """Owns one external server's session for the launcher's lifetime."""

    def __init__(self, name: str, entry: ServerEntry, base_dir: Path) -> None:
        self.name = name
        self.entry = entry
        self.base_dir = base_dir
        self.state: State = "starting"
        self.attempt = 0
        self.last_error = ""
        self.relay = StderrRelay(name) if entry.command else None
        self._client: Client | None = None
        self.pipe: ChildPipe | None = None  # a command's stdin/stdout while up (the fast path)
        self._changed = anyio.Event()
        self._lost = anyio.Event()
        self._scope = anyio.CancelScope()

    @property
    def what(self) -> str:
        return f"command {self.entry.command!r}" if self.entry.command else f"URL {self.entry.url}"

    def unavailable(self) -> str | None:
        """Why a call cannot go through now, or None when the server is up."""
        if self.state == "up":
            return None
        detail = f": {self.last_error}" if self.last_error else ""
        if self.state == "restarting":
            return f"server {self.name!r} is restarting (attempt {self.attempt}){detail}"
        return f"server {self.name!r} is not available ({self.state}){detail}"

    def call_failed(self, exc: BaseException) -> str | None:
        """A call's error: when it shows the session is gone, start the restart and say so."""
        if self.state != "up" or not _is_connection_loss(exc):
            return None
        self._lost.set()
        detail = (self.relay.last_line if self.relay else "") or "the connection closed"
        return f"server {self.name!r} is restarting (attempt {self.attempt + 1}): {detail}"

    async def client(self) -> Client:
        """The live session's client (the proxy's client factory)."""
        from fastmcp.exceptions import ToolError

        if self._client is None or self.state != "up":
            raise ToolError(self.unavailable() or f"server {self.name!r} is not connected")
        return self._client

    def proxy(self) -> FastMCP:
        from fastmcp.server.providers.proxy import FastMCPProxy

        return FastMCPProxy(client_factory=self.client, name=self.name)

    async def wait_started(self) -> None:
        """Until the first session is up; raises :class:`ExternalStartError` if it failed."""
        while self.state == "starting":
            await self._changed.wait()
        if self.state != "up":
            raise ExternalStartError(f"{self.what} failed to start: {self.last_error}")

    def _set(self, state: State) -> None:
        self.state = state
        self._changed.set()
        self._changed = anyio.Event()

    def stop(self) -> None:
        """End the session for good (the server was removed from the config)."""
        self._scope.cancel()

    async def run(self) -> None:
        """Open the session, keep it, reopen it when it dies, until stopped. Never raises."""
        with self._scope:
            await self._keep()
        if self.state == "starting":
            self.last_error = "stopped before it started"
            self._set("failed")

    async def _keep(self) -> None:
        delay = FIRST_BACKOFF
        while True:
            attempt = self.attempt
            try:
                await self._serve_one_session()
                delay = FIRST_BACKOFF  # it was up: the next failure starts a fresh backoff
            except Exception as exc:
                detail = (self.relay.last_line if self.relay else "") or (
                    f"{type(exc).__name__}: {exc}"
                )
                self.last_error = detail[:300]
            if self.state == "starting":
                self._set("failed")
                return  # a server that never started is skipped, not retried
            if self.attempt == attempt:  # not yet counted when the session went down
                self.attempt += 1
                self._set("restarting")
            log.warning(
                "servers.%s: session ended; restarting in %g s (attempt %d): %s",
                self.name,
                delay,
                self.attempt,
                self.last_error or "no error text",
            )
            await anyio.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF)

    async def _serve_one_session(self) -> None:
        from fastmcp import Client

        transport = self._transport()
        client = Client(transport, mode="legacy")
        with anyio.fail_after(START_TIMEOUT):
            await client.__aenter__()
        try:
            self._client = client
            self.pipe = getattr(transport, "pipe", None)
            self.last_error = ""
            self._lost = anyio.Event()
            self._set("up")
            await self._watch(client)
            self.last_error = (self.relay.last_line if self.relay else "") or "the session closed"
        finally:
            self._client = None
            self.pipe = None
            if self.state == "up":  # calls say so while the old session closes
                self.attempt += 1
                self._set("restarting")
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await client.__aexit__(None, None, None)

    async def _watch(self, client: Client) -> None:
        """Return when the session is gone: a call saw it close, or a ping failed."""
        while True:
            with anyio.move_on_after(PING_INTERVAL):
                await self._lost.wait()
                return
            try:
                with anyio.fail_after(PING_TIMEOUT):
                    await client.ping()
            except Exception:
                return

    def _transport(self) -> Any:
        entry = self.entry
        if entry.command:
            from .child import wrapped_command
            from .child_pipe import child_transport

            command, args = wrapped_command(entry.command, list(entry.args))
            cwd = str((self.base_dir / entry.cwd).resolve()) if entry.cwd else None
            return child_transport(
                command,
                args,
                env={**os.environ, **entry.env},
                cwd=cwd,
                errlog=self.relay.file if self.relay else sys.stderr,
            )
        assert entry.url
        headers = dict(entry.headers)
        if entry.url.rstrip("/").endswith("/sse"):
            from fastmcp.client.transports import SSETransport

            return SSETransport(entry.url, headers=headers)
        from fastmcp.client.transports import StreamableHttpTransport

        return StreamableHttpTransport(entry.url, headers=headers)

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
