"""Lists as the servers list them: :class:`OwnLists` takes out of each list what fastmcp adds
to an external server's items on their way through the root.

fastmcp writes ``_meta.fastmcp.tags`` (``[]``) into every tool, prompt, resource and template it
lists, and ``arguments: []`` into a prompt that has none; a client connected to the server
directly sees neither (issue #34). Only an external server's items are touched (an in-process
server is fastmcp's own, and lists so standalone too), found by the names and URIs it exposes;
a name a profile gives is not found and keeps fastmcp's shape. A child that is itself a fastmcp
server and sends ``tags: []`` loses that empty list too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...seams.fastmcp_server import add_server_middleware

# the list method -> the key of its items, and the key naming an item
LISTS = {
    "tools/list": ("tools", "name"),
    "prompts/list": ("prompts", "name"),
    "resources/list": ("resources", "uri"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate"),
}


class OwnLists:
    """An SDK server middleware: an external server's listed items without fastmcp's additions."""

    def __init__(self, composition: Any) -> None:
        self.composition = composition
        self._external: tuple[Any, frozenset[str]] = (None, frozenset())

    def external(self) -> frozenset[str]:
        """The tool and prompt names, resource URIs and templates external servers expose."""
        mounts = self.composition.mounts
        if self._external[0] is not mounts:
            names = {
                name
                for m in mounts
                if m.supervisor is not None
                for name in (*(t.name for t in m.tools), *m.prompts, *m.resources)
            }
            self._external = (mounts, frozenset(names))
        return self._external[1]

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        listing = await call_next(ctx)
        keys = LISTS.get(ctx.method)
        if keys is None or not isinstance(listing, Mapping):
            return listing
        kind, key = keys
        items = listing.get(kind)
        external = self.external()
        if not isinstance(items, list) or not external:
            return listing
        return {
            **listing,
            kind: [
                as_served(item) if isinstance(item, Mapping) and item.get(key) in external else item
                for item in items
            ],
        }


def as_served(item: Mapping[str, Any]) -> dict[str, Any]:
    """*item* without an empty ``_meta.fastmcp.tags`` (and what it leaves empty) and without
    an empty ``arguments``."""
    served = {k: v for k, v in item.items() if not (k == "arguments" and v == [])}
    meta = served.get("_meta")
    if isinstance(meta, Mapping) and isinstance(ours := meta.get("fastmcp"), Mapping):
        if ours.get("tags") == []:
            ours = {k: v for k, v in ours.items() if k != "tags"}
        meta = {k: v for k, v in meta.items() if k != "fastmcp"} | (
            {"fastmcp": ours} if ours else {}
        )
        if meta:
            served["_meta"] = meta
        else:
            del served["_meta"]
    return served


def install_own_lists(composition: Any) -> OwnLists:
    """Inside the access gate in the SDK server's chain (a profile gate, installed later, comes
    first): it sees each list under the names the servers are mounted with."""
    lists = OwnLists(composition)
    add_server_middleware(composition.root, lists)
    return lists
