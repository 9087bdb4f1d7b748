"""The fast path's JSON lines (launcher/external/relay_lines.py): a server's JSON-RPC error
reaches the client as it is; an error the launcher wrote in a reply's place stays isError text."""

from __future__ import annotations

import json

import pytest

from doc_processing_std_tools.launcher.external.child_pipe import LAUNCHER_ERROR_DATA
from doc_processing_std_tools.launcher.external.relay_lines import (
    ErrorReply,
    client_reply,
    error_reply,
    server_error,
)

URL_ERROR = {
    "code": -32042,
    "message": "This request requires browser-based authorization.",
    "data": {"elicitations": [{"mode": "url", "url": "https://example.com", "elicitationId": "1"}]},
}


def test_a_servers_error_reply_is_passed_on_with_its_code_and_data() -> None:
    line = json.dumps({"jsonrpc": "2.0", "id": "dpt~3", "error": URL_ERROR}).encode()
    with pytest.raises(ErrorReply) as raised:
        client_reply(line, None, "dpt~3", 7, "ev_tool")
    assert raised.value.error == URL_ERROR
    assert "browser-based authorization" in str(raised.value)
    assert json.loads(error_reply(7, raised.value.error)) == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": URL_ERROR,
    }


@pytest.mark.parametrize(
    "error",
    [
        {"code": -32603, "message": "over max_line_bytes", "data": LAUNCHER_ERROR_DATA},
        {"code": "x", "message": "not a code"},
        {"code": 1},
        "not an object",
    ],
)
def test_an_error_the_launcher_wrote_or_a_malformed_one_is_not_passed_on(error: object) -> None:
    assert server_error({"error": error}) is None


def test_a_launcher_error_in_a_replys_place_stays_isError_text() -> None:
    error = {"code": -32603, "message": "dropped", "data": LAUNCHER_ERROR_DATA}
    line = json.dumps({"jsonrpc": "2.0", "id": "dpt~1", "error": error}).encode()
    with pytest.raises(Exception) as raised:
        client_reply(line, None, "dpt~1", 1, "pr_overlong")
    assert not isinstance(raised.value, ErrorReply)
    assert "dropped" in str(raised.value)


def test_a_servers_error_is_passed_on_bounded() -> None:
    """A stack trace in the message or a whole echoed argument in data stays with the server."""
    huge = {"code": -32603, "message": "x" * 50_000, "data": {"input": "y" * 50_000}}
    passed = server_error({"error": huge})
    assert passed is not None and passed["code"] == -32603
    assert "data" not in passed and len(passed["message"]) < 1100
    assert passed["message"].endswith("bytes, left out)")
    assert server_error({"error": URL_ERROR}) == URL_ERROR  # (a small error: as it is)


def test_a_result_written_first_as_node_servers_do_is_passed_on_as_it_is() -> None:
    """(No parse and re-encode of the result: the line's bytes, the client's id put in ours'
    place; a line that only looks so, its id inside the result, is parsed as any.)"""
    line = (
        b'{"result":{"content":[{"type":"text","text":"Echo: hi"}]},"jsonrpc":"2.0","id":"dpt~4"}'
    )
    reply = client_reply(line, None, "dpt~4", 9, "ev_echo")
    assert reply.startswith(b'{"result":{"content":[{"type":"text","text":"Echo: hi"}]},')
    assert json.loads(reply) == {
        "jsonrpc": "2.0",
        "id": 9,
        "result": {"content": [{"type": "text", "text": "Echo: hi"}]},
    }
    assert json.loads(client_reply(line, None, "dpt~4", "c-1", "ev_echo"))["id"] == "c-1"
    nested = (
        b'{"result":{"inner":{"a":1},"jsonrpc":"2.0","id":"dpt~4"},"jsonrpc":"2.0","id":"dpt~4"}'
    )
    assert json.loads(client_reply(nested, None, "dpt~4", 9, "ev_echo"))["result"] == {
        "inner": {"a": 1},
        "jsonrpc": "2.0",
        "id": "dpt~4",
    }
