"""The relayed path speaks JSON-RPC as the SDK does: the same bytes in, to the launcher and to
the server alone, get the same kind of answer (issue 26, section 3).

The launcher serves a ``command:`` server's plain ``tools/call`` on its stdio fast path, and
other relayed calls in the ``ToolRelay`` middleware, both ahead of the SDK's own checks; each
case here is one a shortcut once got wrong.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.launch import launcher_command
from helpers.paths import SERVERS
from helpers.stdio_wire import RawStdio

RESULTS = SERVERS / "results_server.py"
RAW_CHILD = SERVERS / "raw_child.py"


def _peer(command: list[str], cwd: Path) -> RawStdio:
    return RawStdio(command, cwd, stderr=subprocess.DEVNULL)


def _launcher(tmp_path: Path, script: Path = RESULTS) -> RawStdio:
    config = tmp_path / "tools.yaml"
    config.write_text(
        "transport: {type: stdio, shutdown_grace: 3}\n"
        f"servers:\n  ext:\n    command: {sys.executable}\n    args: ['{script}']\n"
    )
    return _peer([*launcher_command(), "--config", str(config)], tmp_path)


def _alone(tmp_path: Path) -> RawStdio:
    return _peer([sys.executable, str(RESULTS)], tmp_path)


def _served(reply: dict | None) -> bool:
    return reply is not None and "result" in reply and not reply["result"].get("isError")


def _kind(reply: dict | None) -> object:
    """What a client can tell of an answer: served, a tool error, or a JSON-RPC error code."""
    if reply is None:
        return None
    if "error" in reply:
        return reply["error"]["code"]
    return "error result" if reply["result"].get("isError") else "served"


def _call(
    request_id: int, *, arguments: bytes = b'{"text":"v"}', meta: bytes | None = None
) -> bytes:
    params = b'{"name":"echo","arguments":' + arguments
    if meta is not None:
        params += b',"_meta":' + meta
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}}' % (request_id, params)


# (arguments, _meta) pairs the SDK refuses with -32602, and neighbours it accepts
PARAMS = [
    (b"[]", None),
    (b"false", None),
    (b"0", None),
    (b'""', None),
    (b"null", None),
    (b'{"text":"v"}', b'{"progressToken":{"o":1}}'),
    (b'{"text":"v"}', b'{"progressToken":null}'),
    (b'{"text":"v"}', b'{"progressToken":1.5}'),
    (b'{"text":"v"}', b"[]"),
    (b'{"text":"v"}', b"null"),
    (b'{"text":"v"}', b'{"progressToken":"t"}'),
    (b'{"text":"v"}', b"{}"),
]


def test_params_get_the_answer_the_server_alone_gives(tmp_path: Path) -> None:
    peers = {"alone": _alone(tmp_path), "launcher": _launcher(tmp_path)}
    try:
        kinds: dict[str, list[object]] = {}
        for name, peer in peers.items():
            peer.initialize()
            kinds[name] = []
            for request_id, (arguments, meta) in enumerate(PARAMS, start=1):
                peer.send(_call(request_id, arguments=arguments, meta=meta))
                kinds[name].append(_kind(peer.answer_to(request_id)))
        assert kinds["launcher"] == kinds["alone"]
        assert kinds["alone"][:4] == [-32602] * 4  # (the cases are what they claim to be)
        assert kinds["alone"][-1] == "served"
    finally:
        for peer in peers.values():
            peer.close()


@pytest.mark.slow
def test_a_call_before_initialize_is_refused_as_alone(tmp_path: Path) -> None:
    for make in (_alone, _launcher):
        peer = make(tmp_path)
        try:
            peer.send(_call(5))
            reply = peer.answer_to(5)
            assert _kind(reply) == -32602, (make.__name__, reply)
        finally:
            peer.close()


TAILS = {
    "form feed": b"\x0c",
    "no-break space": "\u00a0".encode(),
    "line separator": "\u2028".encode(),
    "vertical tab": b"\x0b",
}


@pytest.mark.slow
def test_only_json_whitespace_may_follow_a_call(tmp_path: Path) -> None:
    """The server alone serves none of these lines (it drops them); the launcher answers each
    with a parse error carrying the id, runs nothing, and serves the next line."""
    launcher = _launcher(tmp_path)
    try:
        launcher.initialize()
        for i, (name, tail) in enumerate(TAILS.items()):
            launcher.send(_call(10 + 2 * i) + tail)
            reply = launcher.answer_to(10 + 2 * i)
            assert reply is not None and reply["error"]["code"] == -32700, (name, reply)
            launcher.send(_call(11 + 2 * i) + b" \t\r")  # JSON's own whitespace is fine
            assert _served(launcher.answer_to(11 + 2 * i)), name
    finally:
        launcher.close()


@pytest.mark.slow
def test_a_byte_order_mark_or_bad_utf8_is_named_and_answered_with_the_id(tmp_path: Path) -> None:
    launcher = _launcher(tmp_path)
    try:
        launcher.initialize()
        launcher.send(b"\xef\xbb\xbf" + _call(5))
        bom = launcher.answer_to(5)
        assert bom is not None and bom["error"]["code"] == -32700
        assert "byte order mark" in bom["error"]["message"]
        assert "surrogate" not in bom["error"]["message"]
        launcher.send(_call(6, arguments=b'{"text":"v\xff"}'))
        bad = launcher.answer_to(6)
        assert bad is not None and bad["error"]["code"] == -32700
        assert "UTF-8" in bad["error"]["message"]
    finally:
        launcher.close()


def _no_constant(name: str) -> object:
    raise AssertionError(f"{name} reached the client")


def _raw_call(request_id: int, tool: str) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": {}},
        }
    ).encode()


@pytest.mark.slow
def test_a_childs_reply_reaches_the_client_only_as_one_valid_message(tmp_path: Path) -> None:
    launcher = _launcher(tmp_path, RAW_CHILD)
    try:
        launcher.initialize()
        for request_id, tool in enumerate(["two_values", "control_character", "nan"], start=1):
            launcher.send(_raw_call(request_id, tool))
            line = launcher.line()
            assert line is not None, tool
            message = json.loads(line, parse_constant=_no_constant)
            assert message["id"] == request_id, (tool, line[:300])
            assert message["result"]["isError"] is True, (tool, line[:300])
            assert "not valid JSON" in message["result"]["content"][0]["text"] or (
                "cannot carry" in message["result"]["content"][0]["text"]
            )
        launcher.send(_raw_call(9, "fine"))
        assert launcher.answer_to(9)["result"]["content"][0]["text"] == "fine"  # type: ignore[index]
        assert launcher.line(timeout=0.5) is None  # nothing else: no reply to an id never sent
    finally:
        launcher.close()


def test_a_childs_own_request_with_a_launcher_like_id_is_answered(tmp_path: Path) -> None:
    launcher = _launcher(tmp_path, RAW_CHILD)
    try:
        launcher.initialize()
        launcher.send(_raw_call(1, "asks_first"))
        reply = launcher.answer_to(1)
        assert reply is not None, "the child's request was swallowed: its call never ended"
        assert reply["result"]["content"][0]["text"] == "asked, got a result for dpt~1"
    finally:
        launcher.close()


@pytest.mark.slow  # a second launcher, over HTTP (the stdio test above stays in the default run)
def test_over_http_params_get_the_answer_the_server_alone_gives(tmp_path: Path) -> None:
    """The same params POSTed to the launcher over streamable HTTP: a relayed call there goes
    through ``ToolRelay``, which must refuse what the SDK refuses (the answers of the server
    alone come from its stdio run: the same SDK checks)."""
    from helpers.launch import http_launcher
    from helpers.rpc import open_session, reply_message, request, rpc_headers

    alone = _alone(tmp_path)
    try:
        alone.initialize()
        expected = []
        for request_id, (arguments, meta) in enumerate(PARAMS, start=1):
            alone.send(_call(request_id, arguments=arguments, meta=meta))
            expected.append(_kind(alone.answer_to(request_id)))
    finally:
        alone.close()
    config = tmp_path / "http.yaml"
    config.write_text(f"servers:\n  ext:\n    command: {sys.executable}\n    args: ['{RESULTS}']\n")
    got = []
    with http_launcher(config) as launched:
        session = open_session(launched.port)
        for request_id, (arguments, meta) in enumerate(PARAMS, start=1):
            body = _call(request_id, arguments=arguments, meta=meta)
            reply = request(launched.port, "POST", "/mcp", headers=rpc_headers(session), body=body)
            answer = reply_message(reply.headers.get("content-type", ""), reply.body, request_id)
            got.append(_kind(answer))
    assert got == expected
    assert expected[:4] == [-32602] * 4
