"""The mcp SDK's server sessions: the connection a session belongs to, and its request gate.

Imports nothing (``mcp_types`` alone costs ~0.55 s): the servers' own modules use this.
Pinned by ``tests/seams/``.
"""

from __future__ import annotations

from typing import Any


def initialize_accepted(session: Any) -> bool:
    """Whether the SDK's request gate is open for *session*'s connection (``initialize`` done):
    what ``ServerRunner`` checks before a handler runs (``ServerSession._connection``)."""
    return bool(session._connection.initialize_accepted)


def client_name(session: Any) -> str | None:
    """The name the client of *session* gave in its ``initialize`` (``clientInfo.name``), or
    None (``Connection.client_params``: absent until the handshake, or on a 2026-era
    connection whose requests carry no client info)."""
    params = getattr(session_connection(session), "client_params", None) if session else None
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return name if isinstance(name, str) else None


def session_connection(session: Any) -> Any:
    """The mcp connection a server session belongs to (``ServerSession._connection``).

    The session object may be a per-request view; the connection is one per client
    and holds the per-connection ``state`` dict. *session* itself when it has none.
    """
    return getattr(session, "_connection", session)


async def send_raw_to_client(
    session: Any, method: str, params: dict[str, Any] | None, related_request_id: Any = None
) -> Any:
    """Send a request to the client of *session* as it is; its raw result dict.

    ``ServerSession.send_request`` dumps a typed request with its defaults (a form elicitation
    gains ``mode: "form"``) and validates the answer; a relay passes both on unchanged. The
    channel is the one ``send_request`` picks: the stream of the request *related_request_id*
    when given (``ServerSession._request_outbound``), else the connection's
    (``Connection.outbound``). An error answer raises ``MCPError``.
    """
    return await _channel(session, related_request_id).send_raw_request(method, params, None)


async def notify_client(
    session: Any, method: str, params: dict[str, Any] | None, related_request_id: Any = None
) -> None:
    """Send a notification of any method (one the SDK has no type for) to the client of
    *session*, on the channel ``ServerSession.send_notification`` would pick."""
    await _channel(session, related_request_id).notify(method, params)


def _channel(session: Any, related_request_id: Any) -> Any:
    """The channel the SDK's session sends on: the stream of the request *related_request_id*
    when given (``ServerSession._request_outbound``), else the connection's."""
    channel = session._request_outbound if related_request_id is not None else None
    return channel if channel is not None else session._connection.outbound
