"""Resource links and embedded resources under the URIs the launcher exposes
(launcher/external/result_links.py), and on the stdio fast path's reply lines (relay_lines)."""

from __future__ import annotations

import functools
import json
from typing import Any

import mcp_types
from fastmcp import Client, FastMCP

from doc_processing_std_tools.launcher.calls.policed_tools import MountRules
from doc_processing_std_tools.launcher.calls.policy import LockMode
from doc_processing_std_tools.launcher.compose.mounting import mounted_provider
from doc_processing_std_tools.launcher.external.relay_lines import client_reply
from doc_processing_std_tools.launcher.external.result_links import (
    exposed_links,
    exposed_result_links,
)

LINK = {"type": "resource_link", "uri": "demo://resource/dynamic/blob/1", "name": "one"}
EMBEDDED = {"type": "resource", "resource": {"uri": "demo://resource/dynamic/text/4", "text": "t"}}
TEXT = {"type": "text", "text": "see demo://resource/dynamic/blob/1"}


def test_links_and_embedded_resources_are_named_as_exposed_and_nothing_else_changes() -> None:
    result = {"content": [TEXT, LINK, EMBEDDED], "isError": False}
    shown = exposed_links(result, "ev")
    assert shown["content"] == [
        TEXT,
        {**LINK, "uri": "demo://ev/resource/dynamic/blob/1"},
        {"type": "resource", "resource": {"uri": "demo://ev/resource/dynamic/text/4", "text": "t"}},
    ]
    assert result["content"][1] == LINK  # (the server's result is not changed in place)
    assert shown["isError"] is False


def test_without_a_namespace_or_a_link_the_result_is_itself() -> None:
    result = {"content": [LINK]}
    assert exposed_links(result, None) is result
    plain = {"content": [TEXT]}
    assert exposed_links(plain, "ev") is plain


def test_prompt_messages_embedding_a_resource_are_named_as_exposed() -> None:
    result = {
        "messages": [{"role": "user", "content": EMBEDDED}, {"role": "user", "content": TEXT}]
    }
    shown = exposed_links(result, "ev")
    assert shown["messages"][0]["content"]["resource"]["uri"] == "demo://ev/resource/dynamic/text/4"
    assert shown["messages"][1] is result["messages"][1]


def test_a_fast_path_reply_with_a_link_is_rewritten_and_one_without_is_spliced() -> None:
    line = json.dumps(
        {"jsonrpc": "2.0", "id": "dpt~1", "result": {"content": [LINK]}}, separators=(",", ":")
    ).encode()
    reply = json.loads(client_reply(line, None, "dpt~1", 5, "ev_links", "ev"))
    assert reply["id"] == 5
    assert reply["result"]["content"][0]["uri"] == "demo://ev/resource/dynamic/blob/1"
    plain = b'{"jsonrpc":"2.0","id":"dpt~2","result":{"content":[]}}'
    assert client_reply(plain, None, "dpt~2", 6, "ev_x", "ev") == (
        b'{"jsonrpc":"2.0","id":6,"result":{"content":[]}}\n'
    )


async def test_a_call_fastmcp_serves_has_its_links_named_as_exposed_too() -> None:
    """The path where the relay steps aside (a 2026-era client here): the mount's
    ``MountRules.shown`` maps the tool's result."""
    child = FastMCP("child")

    @child.tool
    def links() -> list[Any]:
        return [
            mcp_types.ResourceLink(uri="demo://resource/1", name="one"),
            mcp_types.TextContent(type="text", text="t"),
        ]

    root = FastMCP("root")
    rules = MountRules(
        server="everything",
        namespace="ev",
        admits=lambda name: True,
        lock_mode=lambda tool: LockMode.NONE,
        timeout=10,
        shown=functools.partial(exposed_result_links, "ev"),
    )
    root.add_provider(mounted_provider(child, rules))
    async with Client(root) as client:
        result = await client.call_tool("ev_links", {})
    link, text = result.content
    assert isinstance(link, mcp_types.ResourceLink) and str(link.uri) == "demo://ev/resource/1"
    assert isinstance(text, mcp_types.TextContent) and text.text == "t"


def test_a_link_to_the_web_stays_as_it_is() -> None:
    web = {"type": "resource_link", "uri": "https://example.com/a", "name": "page"}
    shown = exposed_links({"content": [web, LINK]}, "gh")
    assert shown["content"][0] == web  # (not https://gh/example.com/a, another host)
    assert shown["content"][1]["uri"] == "demo://gh/resource/dynamic/blob/1"
