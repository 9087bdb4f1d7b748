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
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO
from urllib.parse import urlsplit, urlunsplit

import anyio

from ..config.schema import DEFAULT_MAX_LINE_BYTES, ServerEntry
from ..reasons import error_reason
from .front import FrontLink, Fronts

if TYPE_CHECKING:
    from fastmcp import Client, FastMCP

    from .child_pipe import ChildPipe

log = logging.getLogger("dpt-launch")

START_TIMEOUT = 30.0  # seconds for a child to start and answer, or a URL to answer
FIRST_BACKOFF, MAX_BACKOFF = 1.0, 30.0
PING_INTERVAL = 2.0  # a live session is pinged this often (a dead child fails at once)
MAX_STDERR_LINE = 8 * 1024  # bytes of one stderr line of a child passed on
MAX_EVENT_BYTES = DEFAULT_MAX_LINE_BYTES  # one SSE event (one reply) from a URL server
HTTP_HINTS = {
    401: "the server refused the credentials; check the entry's headers",
    403: "the server refused the credentials; check the entry's headers",
    404: "no MCP endpoint at this URL; check its path (often /mcp, or /sse for an SSE server)",
}

State = Literal["starting", "up", "restarting", "failed"]
LIST_CHANGED = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    }
)


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
            cut = False  # the rest of a line longer than MAX_STDERR_LINE is dropped
            while raw := pipe.readline(MAX_STDERR_LINE):
                whole = raw.endswith(b"\n")
                if not cut:
                    line = raw.decode("utf-8", "replace").rstrip()
                    if line:
                        self.last_line = line[:300]
                        more = "" if whole else " [line cut at 8 KB]"
                        print(f"[{name}] {line}{more}", file=sys.stderr, flush=True)
                cut = not whole

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()


def shown_url(url: str) -> str:
    """*url* as messages show it: no user or password, no query values (tokens ride there)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = re.sub(r"=[^&]*", "=***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def is_sse_url(url: str) -> bool:
    """An SSE (2024-11-05 era) endpoint: its path ends in ``/sse``, whatever the query says."""
    return urlsplit(url).path.rstrip("/").endswith("/sse")


def _is_connection_loss(exc: BaseException | None) -> bool:
    """Whether an error (or one it was raised from) says the session's connection is gone."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | EOFError):
            return True
        if type(exc).__name__ in ("McpError", "MCPError") and any(
            text in str(exc)
            for text in ("Connection closed", "Session terminated", "Session not found")
        ):
            return True  # (the last two: an HTTP server that restarted and forgot our session)
        if "SSE stream ended without a response" in str(exc):
            return True  # the streamable-HTTP server went away during the call
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class Supervisor:
    """Owns one external server's session for the launcher's lifetime."""

    def __init__(
        self, name: str, entry: ServerEntry, base_dir: Path, fronts: Fronts | None = None
    ) -> None:
        """*fronts*: the launcher's client sessions, which the server's own requests and log
        messages reach (:mod:`.front`); without it they reach no client."""
        self.name = name
        self.entry = entry
        self.base_dir = base_dir
        self.state: State = "starting"
        self.attempt = 0
        self.restarts = 0  # sessions started again after one ended (dpt_external_server_restarts)
        self.last_error = ""
        self.relay = StderrRelay(name) if entry.command else None
        self._client: Client | None = None
        self._counted = False
        self._http_status = 0  # the last HTTP error status a URL server answered (0: none)
        self.pipe: ChildPipe | None = None  # a command's stdin/stdout while up (the fast path)
        self.front = FrontLink(name, fronts or Fronts())
        self._changed = anyio.Event()
        self._lost = anyio.Event()
        self._scope = anyio.CancelScope()
        # called (never awaited) when the server says a list changed: the composition applies it
        self.on_list_changed: Callable[[], None] | None = None

    @property
    def what(self) -> str:
        if self.entry.command:
            return f"command {self.entry.command!r}"
        return f"URL {shown_url(self.entry.url or '')}"

    def _describe(self, exc: BaseException) -> str:
        """Why a session could not be opened or kept, in one line without secrets."""
        last = self.relay.last_line if self.relay else ""
        if isinstance(exc, TimeoutError):
            said = f"; its last stderr line: {last}" if last else ""
            return f"no answer to initialize within {START_TIMEOUT:g} s{said}"
        if last:
            return last
        status = self._http_status
        if status:
            hint = HTTP_HINTS.get(status, "")
            return f"HTTP {status}" + (f": {hint}" if hint else "")
        text = error_reason(exc).removeprefix("Client failed to connect: ")
        if self.entry.url:
            text = text.replace(self.entry.url, shown_url(self.entry.url))
        return text

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
        if not _is_connection_loss(exc):
            return None
        if self.state != "up":  # another call saw it first
            return self.unavailable()
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
        """Open the session, keep it, reopen it when it dies, until stopped. Never raises.

        When it ends (stopped by a reload, or never started) the stderr relay is closed too:
        its pipe and thread would otherwise stay until the launcher exits, one per reload."""
        try:
            with self._scope:
                await self._keep()
            if self.state == "starting":
                self.last_error = "stopped before it started"
                self._set("failed")
        finally:
            self.close()

    async def _keep(self) -> None:
        delay = FIRST_BACKOFF
        while True:
            self._counted = False  # set when this round's session went down (its attempt counted)
            try:
                await self._serve_one_session()
                delay = FIRST_BACKOFF  # it was up: the next failure starts a fresh backoff
            except Exception as exc:
                self.last_error = self._describe(exc)[:300]
            if self.state == "starting":
                self._set("failed")
                return  # a server that never started is skipped, not retried
            if not self._counted:
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
            self.restarts += 1
            delay = min(delay * 2, MAX_BACKOFF)

    async def _serve_one_session(self) -> None:
        from fastmcp import Client

        transport = self._transport()
        self._http_status = 0
        from ...seams import answer_server_requests

        front = self.front
        client = Client(
            transport, mode="legacy", message_handler=self._on_message, log_handler=front.log
        )
        answer_server_requests(
            client, sampling=front.sampling, elicitation=front.elicitation, roots=front.roots
        )
        with anyio.fail_after(START_TIMEOUT):
            await client.__aenter__()
        try:
            self._client = front.client = client
            self.pipe = getattr(transport, "pipe", None)
            self.last_error = ""
            self.attempt = 0  # up again: the next outage counts its attempts from 1
            self._lost = anyio.Event()
            self._set("up")
            why = await self._watch(client)
            self.last_error = (
                why or (self.relay.last_line if self.relay else "") or "the session closed"
            )
        finally:
            self._client = front.client = None
            self.pipe = None
            if self.state == "up":  # calls say so while the old session closes
                self.attempt += 1
                self._counted = True
                self._set("restarting")
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await client.__aexit__(None, None, None)

    async def _on_message(self, message: Any) -> None:
        """A server's ``notifications/*/list_changed`` is handed on (the session's reader must
        not wait: listing again needs it)."""
        if getattr(message, "method", None) in LIST_CHANGED and self.on_list_changed is not None:
            self.on_list_changed()

    def calls_in_flight(self, client: Client) -> int:
        """Requests of ours the server has not answered yet: on the SDK session (relayed calls
        over HTTP, prompts, resources, listings) and on the stdio fast path's pipe."""
        from ...seams import requests_in_flight

        pipe = self.pipe
        return requests_in_flight(client) + (len(pipe.pending) if pipe is not None else 0)

    async def _watch(self, client: Client) -> str:
        """Return when the session is gone (a call saw it close, or a ping failed): why, when it
        is worth more than the server's last stderr line.

        A ping unanswered while a call is in flight is not a hang: a server that handles one
        message at a time answers it after the call, and each call is ended at its own
        ``timeout`` anyway (it then leaves the counts of :meth:`calls_in_flight`)."""
        limit = self.entry.ping_timeout
        while True:
            with anyio.move_on_after(PING_INTERVAL):
                await self._lost.wait()
                return ""
            try:
                with anyio.fail_after(limit):
                    await client.ping()
            except TimeoutError:
                if self.calls_in_flight(client):
                    continue
                return f"no answer to a ping within {limit:g} s (hung?)"
            except Exception:
                return ""

    def _transport(self) -> Any:
        entry = self.entry
        if entry.command:
            from .child import wrapped_command
            from .child_pipe import child_transport

            command, args = wrapped_command(entry.command, list(entry.args))
            cwd = str((self.base_dir / entry.cwd).resolve()) if entry.cwd else None
            if cwd is not None and not os.path.isdir(cwd):
                raise ExternalStartError(f"its cwd {cwd} is not a folder")
            return child_transport(
                command,
                args,
                env={**os.environ, **entry.env},
                cwd=cwd,
                errlog=self.relay.file if self.relay else sys.stderr,
                max_line=entry.max_line_bytes,
                name=self.name,
            )
        assert entry.url
        headers = dict(entry.headers)
        if is_sse_url(entry.url):
            from fastmcp.client.transports import SSETransport

            return SSETransport(entry.url, headers=headers, httpx_client_factory=self._http_client)
        from fastmcp.client.transports import StreamableHttpTransport

        return StreamableHttpTransport(
            entry.url,
            headers=headers,
            httpx_client_factory=self._http_client,
            max_sse_event_size=MAX_EVENT_BYTES,
        )

    def _http_client(
        self, headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None, **_: Any
    ) -> Any:
        """The SDK's default HTTP client, noting error statuses: "HTTP 401" says more than the
        SDK's "Server returned an error response". (fastmcp's ``follow_redirects`` is dropped, as
        with the SDK's default client: the transports follow same-origin redirects themselves.)"""
        from ...seams import mcp_http_client

        async def note_status(response: Any) -> None:
            if response.status_code >= 400:
                self._http_status = response.status_code

        client = mcp_http_client(headers, timeout, auth)
        client.event_hooks.setdefault("response", []).append(note_status)
        return client

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
