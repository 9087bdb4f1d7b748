"""Resources embedded in an external server's prompt, named as the launcher exposes them
(issue #34): as a tool result's links (:mod:`..external.result_links`), so a client can read
back what a prompt embeds. fastmcp passes a proxied prompt's messages on with the server's
own URIs, which the launcher serves only under the namespace."""

from __future__ import annotations

from typing import Any

from ...seams.fastmcp_server import add_server_middleware
from ..external.result_links import exposed_links


class PromptLinks:
    """An SDK server middleware: ``prompts/get`` of an external server's prompt, its embedded
    resources under the exposed URIs."""

    def __init__(self, composition: Any) -> None:
        self.composition = composition

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        result = await call_next(ctx)
        if ctx.method != "prompts/get" or not isinstance(result, dict):
            return result
        name = (ctx.params or {}).get("name")
        mount = self.composition.owners().prompt_mounts.get(name) if isinstance(name, str) else None
        if mount is None or mount.supervisor is None:
            return result
        return exposed_links(result, mount.entry.namespace)


def install_prompt_links(composition: Any) -> PromptLinks:
    links = PromptLinks(composition)
    add_server_middleware(composition.root, links)
    return links
