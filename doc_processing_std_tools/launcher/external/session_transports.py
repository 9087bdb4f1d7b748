"""How a session to an external server is reached: the command's transport (its stderr relayed
line by line) or the URL's (SSE or streamable HTTP), and what its failures say.

A child's stderr reaches the launcher's stderr line by line, prefixed with its mount name; its
stdout carries only the protocol (:mod:`.child_pipe`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio

from ...seams.http_sessions import mcp_http_client
from ...seams.session_reads import TakingSSE, TakingStreamableHttp
from ..config.schema import DEFAULT_MAX_LINE_BYTES, ServerEntry
from .child_pipe import custom_notification
from .child_process import ChildTransport
from .child_start import StderrRelay, command_line
from .wording import ExternalStartError

MAX_EVENT_BYTES = DEFAULT_MAX_LINE_BYTES  # one SSE event (one reply) from a URL server
HTTP_HINTS = {
    401: "the server refused the credentials; check the entry's headers",
    403: "the server refused the credentials; check the entry's headers",
    404: "no MCP endpoint at this URL; check its path (often /mcp, or /sse for an SSE server)",
}


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
    process: Any = None,
) -> Any:
    """The transport of a session to *entry*: its command run over a :class:`.ChildPipe` (in
    *process* when it was started already: :mod:`.child_start`), or its URL with *auth* (an
    ``httpx.Auth``, or None)."""
    if entry.command:
        command, args, cwd = command_line(entry, base_dir)
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
            process=process,
        )
    assert entry.url
    headers = dict(entry.headers)
    if is_sse_url(entry.url):
        return TakingSSE(entry.url, headers=headers, auth=auth, httpx_client_factory=http.client)
    return TakingStreamableHttp(
        entry.url,
        headers=headers,
        auth=auth,
        httpx_client_factory=http.client,
        max_sse_event_size=MAX_EVENT_BYTES,
    )


Notify = Callable[[str, Any], Awaitable[None]]


def pass_notifications(transport: Any, notify: Notify | None) -> None:
    """The server's notifications that no MCP version defines, and ``notifications/tasks/status``
    (the SDK's session drops both), go to *notify* (None: no longer): a command's read off its
    pipe, a URL's off its session's read stream."""
    pipe = getattr(transport, "pipe", None)
    if pipe is not None:
        pipe.on_notification = notify
    elif isinstance(transport, TakingSSE | TakingStreamableHttp):
        transport.take = _taker(notify) if notify is not None else None


def _taker(notify: Notify) -> Callable[[Any], Awaitable[bool]]:
    async def take(message: Any) -> bool:
        custom = custom_notification(message)
        if custom is None:
            return False
        await notify(*custom)
        return True

    return take
