"""The fast path's reply rewriting (launcher/relay.py), in-process; end to end: test_external, test_stdio."""

from __future__ import annotations

import json

import pytest
from fastmcp.exceptions import ToolError

from doc_processing_std_tools.launcher.relay import _client_reply


def test_a_reply_in_the_sdks_shape_is_spliced_byte_for_byte() -> None:
    result = b'{"content":[{"type":"text","text":"caf\xc3\xa9 \\"dpt~1\\""}],"isError":false}'
    line = b'{"jsonrpc":"2.0","id":"dpt~1","result":' + result
    reply = _client_reply(line, None, "dpt~1", "client-7", "ext_t")
    assert reply == b'{"jsonrpc":"2.0","id":"client-7","result":' + result + b"\n"


def test_other_shapes_are_parsed_and_keep_their_result() -> None:
    line = b'{"result": {"content": [], "structuredContent": {"n": 1.5}}, "id": "dpt~2", "jsonrpc": "2.0"}'
    reply = json.loads(_client_reply(line, None, "dpt~2", 4, "ext_t"))
    assert reply == {
        "jsonrpc": "2.0",
        "id": 4,
        "result": {"content": [], "structuredContent": {"n": 1.5}},
    }


def test_connection_keys_of_the_2026_era_are_dropped_from_the_results_meta() -> None:
    line = (
        b'{"jsonrpc":"2.0","id":"dpt~3","result":{"content":[],"_meta":'
        b'{"io.modelcontextprotocol/protocolVersion":"2026-07-28","mine":1}}}'
    )
    reply = json.loads(_client_reply(line, None, "dpt~3", 1, "ext_t"))
    assert reply["result"]["_meta"] == {"mine": 1}


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (
            b'{"jsonrpc":"2.0","id":"dpt~4","error":{"code":-32602,"message":"no such tool"}}',
            "no such tool",
        ),
        (
            b'{"jsonrpc":"2.0","id":"dpt~4","result":{"content":[{"type":"text","text":"\xff"}]}}',
            "not valid JSON",
        ),
        (
            b'{"jsonrpc":"2.0","id":"dpt~4","result":{"content":[{"type":"text","text":"\\ud800"}]}}',
            "not valid Unicode",
        ),
    ],
)
def test_replies_the_client_could_not_take_become_tool_errors(line: bytes, says: str) -> None:
    with pytest.raises(ToolError, match=says) as caught:
        _client_reply(line, None, "dpt~4", 1, "ext_t")
    assert "ext_t" in str(caught.value)
