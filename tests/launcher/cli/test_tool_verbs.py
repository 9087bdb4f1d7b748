"""What ``dpt-launch call`` prints of a tool's result (``tool_verbs.printed``)."""

from __future__ import annotations

from typing import Any

import pytest
from fastmcp.client.client import CallToolResult
from mcp_types import ImageContent, TextContent

from doc_processing_std_tools.launcher.cli.tool_verbs import printed


def result(text: str | None, structured: dict[str, Any] | None, error: bool = False) -> Any:
    content: list[Any] = [TextContent(type="text", text=text)] if text is not None else []
    return CallToolResult(content, structured, None, is_error=error)


@pytest.mark.parametrize(
    ("text", "structured", "shown"),
    [
        # an external tool: its text, not the structured content beside it
        ("[FILE] a.txt\n[DIR] docs", {"content": "a.txt, docs"}, "[FILE] a.txt\n[DIR] docs"),
        ("4242", {"result": 4242}, "4242"),  # a wrapped int (fastmcp's {"result": ...})
        # an in-process tool's dict: its text is that dict as compact JSON; shown indented
        (
            '{"key":"k","value":"v"}',
            {"key": "k", "value": "v"},
            '{\n  "key": "k",\n  "value": "v"\n}',
        ),
        (None, {"a": 1}, '{\n  "a": 1\n}'),  # no text: the structured content
        ("just text", None, "just text"),
    ],
)
def test_call_prints_the_text_a_client_shows(text, structured, shown) -> None:
    assert printed(result(text, structured)) == shown


def test_an_error_prints_its_text_and_images_print_nothing() -> None:
    assert printed(result("no such key 'k'", {"error": "x"}, error=True)) == "no such key 'k'"
    image = ImageContent(type="image", data="AAAA", mimeType="image/png")
    assert printed(CallToolResult([image], None, None)) == ""
