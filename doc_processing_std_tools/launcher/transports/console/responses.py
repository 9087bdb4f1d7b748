"""What every console response carries (its security headers), and how a call's result and an
error are shown on a page."""

from __future__ import annotations

import json
import re
from typing import Any

from mcp.types import CallToolResult, ImageContent, TextContent

from ..asgi import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # (no-referrer: a POST's Origin is "null")
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
IMAGE_TYPE = re.compile(r"^image/(png|jpeg|gif|webp)$")


class SecurityHeaders:
    """Every console response carries :data:`SECURITY_HEADERS`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in message.get("headers", [])}
                message["headers"] = [
                    *message.get("headers", []),
                    *(h for h in SECURITY_HEADERS if h[0] not in names),
                ]
            await send(message)

        await self.app(scope, receive, with_headers)


def shown_result(result: CallToolResult) -> dict[str, Any]:
    """A call's result as the page shows it: text, images (as data URLs) and structured JSON."""
    blocks: list[dict[str, str]] = []
    for block in result.content:
        if isinstance(block, TextContent):
            blocks.append({"kind": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            mime = (
                block.mime_type if IMAGE_TYPE.match(block.mime_type) else "application/octet-stream"
            )
            blocks.append({"kind": "image", "url": f"data:{mime};base64,{block.data}"})
        else:
            blocks.append({"kind": "text", "text": block.model_dump_json(indent=2)})
    structured = result.structured_content
    return {
        "error": bool(result.is_error),
        "blocks": blocks,
        "structured": json.dumps(structured, indent=2, ensure_ascii=False) if structured else None,
    }


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__
