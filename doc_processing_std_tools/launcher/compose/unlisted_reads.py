"""``resources/read`` of a URI no server lists, under an external server's namespace: asked of
that server, as a direct connection would (issue #34).

A server may serve URIs it does not list (server-everything answers any
``demo://resource/static/document/...`` itself, with its own error for a missing one). fastmcp
reads only what a server lists or a template matches, and answers anything else with its own
"Resource not found". :class:`UnlistedReads` sends such a read to the external server whose
namespace the URI carries (under the server's own URI), and passes its answer or its error on
unchanged but for the URI, shown as the client named it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from ...seams.fastmcp_server import add_server_middleware, own_uri

NOT_FOUND = "Resource not found:"  # fastmcp's message when it finds no resource or template


class UnlistedReads:
    """An SDK server middleware: a read fastmcp cannot place goes to its namespace's server."""

    def __init__(self, composition: Any) -> None:
        self.composition = composition

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method != "resources/read":
            return await call_next(ctx)
        try:
            return await call_next(ctx)
        except MCPError as exc:
            if exc.error.code != INVALID_PARAMS or not exc.error.message.startswith(NOT_FOUND):
                raise
            uri = (ctx.params or {}).get("uri")
            owner = owner_of(self.composition.mounts, uri) if isinstance(uri, str) else None
            if owner is None:
                raise
            mount, own = owner
        result = await mount.supervisor.front.read(ctx.session, ctx.request_id, own)
        contents = result.get("contents")
        if isinstance(contents, list):
            result = {
                **result,
                "contents": [
                    {**c, "uri": uri} if isinstance(c, dict) and c.get("uri") == own else c
                    for c in contents
                ],
            }
        return result


def resource_not_found(uri: str) -> MCPError:
    """The root's answer to a read of a URI nothing serves (fastmcp's ``_on_read_resource``)."""
    return MCPError(INVALID_PARAMS, f"{NOT_FOUND} {uri!r}", {"uri": uri})


def owner_of(mounts: Sequence[Any], uri: str) -> tuple[Any, str] | None:
    """The connected external mount whose namespace *uri* carries, and the URI as that server
    names it; None when none does."""
    for mount in mounts:
        namespace = mount.entry.namespace
        if mount.supervisor is None or not namespace or mount.supervisor.front.client is None:
            continue
        own = own_uri(namespace, uri)
        if own != uri:
            return mount, own
    return None


def install_unlisted_reads(composition: Any) -> UnlistedReads:
    reads = UnlistedReads(composition)
    add_server_middleware(composition.root, reads)
    return reads
