"""The mcp SDK's client sessions, beyond their typed API: a raw request on a client session (a relay
needs neither a typed request nor a validated result), what waits for a reply, whether a
and a client session's own callbacks.

Pinned by ``tests/seams/``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types


def answer_server_requests(
    client: Any,
    *,
    sampling: Any,
    elicitation: Any,
    roots: Any,
    sampling_capability: mcp_types.SamplingCapability | None = None,
) -> None:
    """Answer a fastmcp ``Client``'s server-initiated requests with SDK callbacks as they are.

    fastmcp's ``sampling_handler``/``elicitation_handler``/``roots`` wrap a handler so that
    any error becomes -32603 and an elicitation's content is re-typed; a relay passes the
    client's answer and error on unchanged, so it sets the session's callbacks itself
    (``Client._session_kwargs``, read when the session opens). The SDK session then
    declares sampling (*sampling_capability*, by default with ``tools``), elicitation and
    roots (``listChanged``) in ``initialize``: each one whose callback is not None.
    """
    kwargs = client._session_kwargs
    if sampling is not None:
        kwargs["sampling_callback"] = sampling
        kwargs["sampling_capabilities"] = sampling_capability or mcp_types.SamplingCapability(
            tools=mcp_types.SamplingToolsCapability()
        )
    if elicitation is not None:
        kwargs["elicitation_callback"] = elicitation
    if roots is not None:
        kwargs["list_roots_callback"] = roots


async def send_raw_request(
    client: Any,
    method: str,
    params: dict[str, Any],
    *,
    on_progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """Send one request on a connected fastmcp ``Client``'s SDK session; its raw result dict.

    ``ClientSession.send_request`` wants a typed request and validates the typed
    result; a relay needs neither. This stamps the request as the session would
    (``ClientSession._stamp``: protocol headers for HTTP) and sends it through the
    session's dispatcher (``_dispatcher.send_raw_request``), which sends
    ``notifications/cancelled`` when the caller is cancelled, gives the request a
    progress token of its own when *on_progress* is set, and raises ``MCPError``
    for an error response or a closed connection.
    """
    session = client.session
    data: dict[str, Any] = {"method": method, "params": params}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    if on_progress is not None:
        opts["on_progress"] = on_progress
    result: dict[str, Any] = await session._dispatcher.send_raw_request(
        method, data["params"], opts
    )
    return result


def requests_in_flight(client: Any) -> int:
    """How many requests sent on a connected fastmcp ``Client``'s SDK session still wait for
    their reply (``JSONRPCDispatcher._pending``: one entry per request, removed when it is
    answered, fails or is cancelled)."""
    return len(getattr(client.session._dispatcher, "_pending", ()))
