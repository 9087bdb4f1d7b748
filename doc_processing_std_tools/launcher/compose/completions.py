"""``completion/complete`` for the prompts and resource templates of mounted servers, as a direct
connection has it (issue #34).

fastmcp's root answers completions only with a handler of its own, and mounting passes none
on. :class:`Completions` answers the request for the server that exposes the reference: an
external server is asked under its own prompt name or template URI (the namespace taken off),
and its answer or its error reaches the client as it is; an in-process server with a
completion handler of its own (``@mcp.completion``) is asked through that handler. A reference
no server exposes gets an empty completion, as fastmcp gives one it does not know. The root
declares ``completions`` when some mounted server does.
"""

from __future__ import annotations

from typing import Any

import mcp_types
from fastmcp.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError

from ...seams.client_sessions import send_raw_request
from ...seams.fastmcp_server import add_server_middleware, low_level_server, own_name, own_uri
from .owners import Owners

COMPLETE = "completion/complete"
DECLARING = frozenset({"initialize", "server/discover"})  # the results that declare capabilities
EMPTY = {"completion": {"values": [], "hasMore": False, "total": 0}}


class Completions:
    """An SDK server middleware: ``completion/complete`` asked of the reference's server, and
    ``completions`` declared in ``initialize`` when some mounted server offers it."""

    def __init__(self, composition: Any) -> None:
        self.composition = composition

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method == COMPLETE:
            return await self.complete(ctx)
        result = await call_next(ctx)
        if ctx.method in DECLARING and self.offered():
            return with_capability(result, "completions", mcp_types.CompletionsCapability())
        return result

    def offered(self) -> bool:
        """Whether some mounted server declares ``completions`` (an external one in its
        ``initialize``, an in-process one by a completion handler of its own)."""
        for mount in self.composition.mounts:
            if mount.supervisor is None:
                if low_level_server(mount.server).get_request_handler(COMPLETE) is not None:
                    return True
                continue
            client = mount.supervisor.front.client  # (None while down)
            told = client.initialize_result if client is not None else None
            if told is not None and told.capabilities.completions is not None:
                return True
        return False

    async def complete(self, ctx: Any) -> Any:
        try:
            params = mcp_types.CompleteRequestParams.model_validate(ctx.params, by_name=False)
        except ValidationError as exc:
            raise MCPError(mcp_types.INVALID_PARAMS, "Invalid request parameters", "") from exc
        ref = params.ref
        prompt = isinstance(ref, mcp_types.PromptReference)
        key = ref.name if isinstance(ref, mcp_types.PromptReference) else ref.uri
        found = owner(self.composition.owners(), key, prompt=prompt)
        if found is None:
            return EMPTY
        mount, own = found
        raw = dict(ctx.params)
        raw["ref"] = {**raw["ref"], ("name" if prompt else "uri"): own}
        if mount.supervisor is None:
            entry = low_level_server(mount.server).get_request_handler(COMPLETE)
            if entry is None:
                return EMPTY
            typed = mcp_types.CompleteRequestParams.model_validate(raw, by_name=False)
            answer = await entry.handler(ctx, typed)
            if isinstance(answer, mcp_types.CompleteResult):
                return answer.model_dump(by_alias=True, mode="json", exclude_none=True)
            return answer
        try:
            client = await mount.supervisor.client()
        except ToolError as exc:  # (down, restarting, needs a login: why)
            raise MCPError(mcp_types.INTERNAL_ERROR, str(exc)) from None
        return await send_raw_request(client, COMPLETE, raw)


def owner(owners: Owners, key: str, *, prompt: bool) -> tuple[Any, str] | None:
    """The mount that exposes the prompt named *key* (or the resource template *key*), and
    that name or template as its server names it; None when no mount does."""
    mount = (owners.prompt_mounts if prompt else owners.resource_mounts).get(key)
    if mount is None:
        return None
    namespace = mount.entry.namespace
    return mount, own_name(namespace, key) if prompt else own_uri(namespace, key)


def with_capability(result: Any, name: str, value: Any) -> Any:
    """*result* (``initialize``'s or ``server/discover``'s: the SDK's typed result, or a dict a
    middleware made) declaring the capability *name* as *value*, unless it declares it already."""
    if isinstance(result, BaseModel):  # (InitializeResult; a 2026-era DiscoverResult)
        capabilities = getattr(result, "capabilities", None)
        if not isinstance(capabilities, BaseModel) or getattr(capabilities, name, 0) is not None:
            return result
        declared = capabilities.model_copy(update={name: value})
        return result.model_copy(update={"capabilities": declared})
    capabilities = result.get("capabilities") if isinstance(result, dict) else None
    if not isinstance(capabilities, dict) or name in capabilities:
        return result
    dumped = value.model_dump(by_alias=True, mode="json", exclude_none=True)
    return {**result, "capabilities": {**capabilities, name: dumped}}


def install_completions(composition: Any) -> Completions:
    completions = Completions(composition)
    add_server_middleware(composition.root, completions)
    return completions
