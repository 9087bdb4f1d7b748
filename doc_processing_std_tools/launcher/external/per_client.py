"""A client session's own upstream session (``sessions: per_client``): opened with what the client
said in its ``initialize`` (its ``clientInfo``, and only the capabilities it declared), and whose
server-to-client traffic goes to that client alone.

Everything the server keeps per session then follows the client as on a direct connection: its
roots (asked outside a call too) and their changes, its log level (``logging/setLevel`` is
forwarded, and the launcher filters nothing), its subscriptions, and the tool list the server
shows a client with those capabilities. The session ends with the client's connection (its
teardown closes it; :class:`.session_pool.SessionPool`).
"""

from __future__ import annotations

import logging
from typing import Any

import mcp_types
from fastmcp import Client
from fastmcp.client.transports import ClientTransport

from ...seams.client_sessions import answer_server_requests
from ...seams.server_sessions import session_connection
from .client_requests import FrontLink, Fronts
from .relay_lines import HANDSHAKE_ERA

log = logging.getLogger("dpt-launch")


class OwnFront(FrontLink):
    """One client session's link from its own upstream session: every request and log message
    of the server is that client's (tied to its latest call in flight, else sent on the
    connection's own stream)."""

    filters_levels = False  # (its logging/setLevel reached the server, which filters)

    def __init__(self, name: str, fronts: Fronts, session: Any) -> None:
        super().__init__(name, fronts)
        self.session = session
        self.connection = session_connection(session)
        self.settled = False  # (the server's set-up is over: its list_changed mean a change)

    def follows(self, session: Any) -> bool:
        return session_connection(session) is self.connection

    async def list_changed(self, method: str) -> None:
        """The server says one of its lists changed for this client: the client is told (the
        launch-time names still decide what it may see)."""
        send = {
            "notifications/tools/list_changed": "send_tool_list_changed",
            "notifications/prompts/list_changed": "send_prompt_list_changed",
            "notifications/resources/list_changed": "send_resource_list_changed",
        }.get(method)
        if send is None or not self.settled:
            return
        try:
            await getattr(self.session, send)()
        except Exception as exc:  # (the client went away meanwhile)
            log.debug("servers.%s: could not pass %s on: %s", self.name, method, exc)

    def _front(self, what: str) -> tuple[Any, Any]:
        calls = list(self._calls.values())
        if calls:
            return calls[-1]
        return self.session, None


def lasting(session: Any) -> bool:
    """Whether the client of *session* holds a session that lasts (a handshake-era connection,
    from ``initialize`` to its end). A 2026-era request stands alone (its connection is made for
    it): such a client shares the launcher's session, never one opened per request."""
    return getattr(session_connection(session), "protocol_version", None) in HANDSHAKE_ERA


def client_key(session: Any) -> str:
    """The pool's key of a client session: its connection (one per client)."""
    return f"client:{id(session_connection(session))}"


def own_client(transport: Any, link: OwnFront, message_handler: Any) -> Client[ClientTransport]:
    """A client for *link*'s session that tells the server what its client told the launcher:
    its ``clientInfo`` and the capabilities it declared (sampling as declared, elicitation,
    roots), each answered by that client."""
    params = getattr(link.connection, "client_params", None)
    info = getattr(params, "client_info", None)
    declared = getattr(link.connection, "client_capabilities", None)
    return declaring_client(
        transport,
        link,
        message_handler,
        info if isinstance(info, mcp_types.Implementation) else None,
        declared if isinstance(declared, mcp_types.ClientCapabilities) else None,
    )


def stdio_client(
    transport: Any, link: FrontLink, message_handler: Any, params: dict[str, Any]
) -> Client[ClientTransport] | None:
    """A client for the supervisor's own session that tells the server what the stdio client
    said in its ``initialize`` (*params*, as read off the wire: :mod:`.client_hello`); None when
    they do not validate (the launcher's own name and capabilities then)."""
    try:
        declared = mcp_types.ClientCapabilities.model_validate(params.get("capabilities") or {})
        info = mcp_types.Implementation.model_validate(params.get("clientInfo"))
    except ValueError:
        return None
    return declaring_client(transport, link, message_handler, info, declared)


def declaring_client(
    transport: Any,
    link: FrontLink,
    message_handler: Any,
    info: mcp_types.Implementation | None,
    declared: mcp_types.ClientCapabilities | None,
) -> Client[ClientTransport]:
    """A client whose ``initialize`` says *info* and declares what *declared* does (sampling,
    elicitation, roots), each answered through *link*."""
    client: Client[ClientTransport] = Client(
        transport,
        mode="legacy",
        message_handler=message_handler,
        log_handler=link.log,
        client_info=info,
    )
    sampling = declared.sampling if declared is not None else None
    answer_server_requests(
        client,
        sampling=link.sampling if sampling is not None else None,
        sampling_capability=sampling,
        elicitation=link.elicitation if declared and declared.elicitation else None,
        roots=link.roots if declared and declared.roots else None,
    )
    return client
