"""The mcp SDK's streamable HTTP pieces: its session manager (with each session's events kept
apart in a shared event store), how many sessions it holds, and its default HTTP client.

Pinned by ``tests/seams/``.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from fastmcp.server.session_scoped_event_store import SessionScopedEventStore
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared._httpx_utils import create_mcp_http_client


class ScopedSessions(StreamableHTTPSessionManager):
    """The SDK's session manager, each session's stream ids kept apart in a shared event store
    (as fastmcp's own manager does: the SDK reads ``self.event_store`` once per transport, so
    a property hands each its own ``SessionScopedEventStore``; without it, request id 1 of two
    sessions would share a stream)."""

    _shared_event_store: Any = None

    @property
    def event_store(self) -> Any:
        if self._shared_event_store is None:
            return None
        return SessionScopedEventStore(self._shared_event_store, session_id=uuid4().hex)

    @event_store.setter
    def event_store(self, value: Any) -> None:
        self._shared_event_store = value


def session_manager(event_store: Any = None, **options: Any) -> ScopedSessions:
    """The mcp SDK's ``StreamableHTTPSessionManager`` with *options* and a shared *event_store*."""
    return ScopedSessions(event_store=event_store, **options)


def open_http_sessions(manager: Any) -> int:
    """How many MCP sessions a ``StreamableHTTPSessionManager`` holds open (``_server_instances``:
    one entry per session id, removed when the session ends or idles out)."""
    return len(manager._server_instances)


def mcp_http_client(headers: dict[str, str] | None, timeout: Any, auth: Any) -> Any:
    """The ``httpx2.AsyncClient`` the mcp SDK's HTTP transports make by default (its timeouts:
    30 s to connect, 300 s to read), from ``mcp.shared._httpx_utils``."""
    return create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
