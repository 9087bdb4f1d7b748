"""How a session to an external server is reached: the command's transport (its stderr relayed
line by line) or the URL's (SSE or streamable HTTP), and what its failures say.

A child's stderr reaches the launcher's stderr line by line, prefixed with its mount name; its
stdout carries only the protocol (:mod:`.child_pipe`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import anyio
from fastmcp.client.transports import SSETransport, StreamableHttpTransport

from ...exceptions import DptError
from ...seams.http_sessions import mcp_http_client
from ..config.schema import DEFAULT_MAX_LINE_BYTES, ServerEntry
from .child import wrapped_command
from .child_process import ChildTransport

MAX_STDERR_LINE = 8 * 1024  # bytes of one stderr line of a child passed on
MAX_EVENT_BYTES = DEFAULT_MAX_LINE_BYTES  # one SSE event (one reply) from a URL server
HTTP_HINTS = {
    401: "the server refused the credentials; check the entry's headers",
    403: "the server refused the credentials; check the entry's headers",
    404: "no MCP endpoint at this URL; check its path (often /mcp, or /sse for an SSE server)",
}


class ExternalStartError(DptError):
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


class HttpStatusNote:
    """The SDK's default HTTP client, noting error statuses: "HTTP 401" says more than the
    SDK's "Server returned an error response". (fastmcp's ``follow_redirects`` is dropped, as
    with the SDK's default client: the transports follow same-origin redirects themselves.)"""

    def __init__(self) -> None:
        self.status = 0  # the last HTTP error status the server answered (0: none)
        self.wants_oauth = False  # a 401 came with WWW-Authenticate

    def clear(self) -> None:
        self.status, self.wants_oauth = 0, False

    def client(
        self, headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None, **_: Any
    ) -> Any:
        client = mcp_http_client(headers, timeout, auth)
        client.event_hooks.setdefault("response", []).append(self._note)
        return client

    async def _note(self, response: Any) -> None:
        if response.status_code >= 400:
            self.status = response.status_code
            self.wants_oauth = "www-authenticate" in response.headers


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


def is_connection_loss(exc: BaseException | None) -> bool:
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


def session_transport(
    name: str,
    entry: ServerEntry,
    base_dir: Path,
    relay: StderrRelay | None,
    http: HttpStatusNote,
    auth: Any = None,
) -> Any:
    """The transport of a session to *entry*: its command run over a :class:`.ChildPipe`, or its
    URL with *auth* (an ``httpx.Auth``, or None)."""
    if entry.command:
        command, args = wrapped_command(entry.command, list(entry.args))
        cwd = str((base_dir / entry.cwd).resolve()) if entry.cwd else None
        if cwd is not None and not os.path.isdir(cwd):
            raise ExternalStartError(f"its cwd {cwd} is not a folder")
        return ChildTransport(
            command,
            args,
            env={**os.environ, **entry.env},
            cwd=cwd,
            errlog=relay.file if relay else sys.stderr,
            max_line=entry.max_line_bytes,
            name=name,
        )
    assert entry.url
    headers = dict(entry.headers)
    if is_sse_url(entry.url):
        return SSETransport(entry.url, headers=headers, auth=auth, httpx_client_factory=http.client)
    return StreamableHttpTransport(
        entry.url,
        headers=headers,
        auth=auth,
        httpx_client_factory=http.client,
        max_sse_event_size=MAX_EVENT_BYTES,
    )
