"""Resource links and embedded resources in an external server's results, under the URIs the
launcher exposes (issue #34).

A server mounted under a namespace has its resources listed as ``scheme://namespace/path``;
a link in its tool result still names ``scheme://path``, which the launcher does not serve
("Resource not found"). :func:`exposed_links` names each ``resource_link`` and each embedded
``resource`` as the launcher lists it, so the client can read what it was pointed at. A link to
the web (``http``/``https``) stays as it is: a client opens it there, and under a namespace it
would name another host (``https://ns/example.com/a``).
"""

from __future__ import annotations

from typing import Any

import mcp_types

from ...seams.fastmcp_server import exposed_uri

URI_KEY = b'"uri"'  # a result line without it holds no link (a line with \u escapes is parsed)
WEB_SCHEMES = ("http://", "https://")


def _shown(namespace: str, uri: str) -> str:
    return uri if uri.lower().startswith(WEB_SCHEMES) else exposed_uri(namespace, uri)


def exposed_links(result: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    """*result* (a ``tools/call`` or ``prompts/get`` result) with the URIs of its resource
    links and embedded resources as exposed under *namespace*; *result* itself when none."""
    if not namespace:
        return result
    if isinstance(content := result.get("content"), list):
        mapped = [_block(block, namespace) for block in content]
        if any(new is not old for new, old in zip(mapped, content, strict=True)):
            result = {**result, "content": mapped}
    if isinstance(messages := result.get("messages"), list):
        shown = [_message(message, namespace) for message in messages]
        if any(new is not old for new, old in zip(shown, messages, strict=True)):
            result = {**result, "messages": shown}
    return result


def _block(block: Any, namespace: str) -> Any:
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind == "resource_link" and isinstance(uri := block.get("uri"), str):
        return {**block, "uri": _shown(namespace, uri)}
    resource = block.get("resource")
    if kind == "resource" and isinstance(resource, dict) and isinstance(resource.get("uri"), str):
        return {**block, "resource": {**resource, "uri": _shown(namespace, resource["uri"])}}
    return block


def _message(message: Any, namespace: str) -> Any:
    if not isinstance(message, dict):
        return message
    content = message.get("content")
    shown = _block(content, namespace)
    return message if shown is content else {**message, "content": shown}


def exposed_result_links(namespace: str, result: Any) -> Any:
    """A fastmcp ``ToolResult`` (a call fastmcp's proxy served) with its resource links and
    embedded resources as :func:`exposed_links` names them; anything else as it is."""
    content = getattr(result, "content", None)
    if not isinstance(content, list):
        return result
    shown = [_typed_block(block, namespace) for block in content]
    if all(new is old for new, old in zip(shown, content, strict=True)):
        return result
    result.content = shown
    return result


def _typed_block(block: Any, namespace: str) -> Any:
    if not isinstance(block, mcp_types.ResourceLink | mcp_types.EmbeddedResource):
        return block
    raw = block.model_dump(by_alias=True, mode="json", exclude_none=True)
    shown = _block(raw, namespace)
    return block if shown == raw else type(block).model_validate(shown, by_name=False)
