"""The fast path's reply rewriting (launcher/external/fast_path.py), in-process; end to end:
test_external_servers.py here and transports/test_stdio.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastmcp.exceptions import ToolError

from doc_processing_std_tools.launcher.external.relay_lines import client_reply as _client_reply
from helpers.paths import SERVERS


def test_a_reply_in_the_sdks_shape_is_spliced_byte_for_byte() -> None:
    result = b'{"content":[{"type":"text","text":"caf\xc3\xa9 \\"dpt~1\\""}],"isError":false}'
    line = b'{"jsonrpc":"2.0","id":"dpt~1","result":' + result + b"}"
    reply = _client_reply(line, None, "dpt~1", "client-7", "ext_t")
    assert reply == b'{"jsonrpc":"2.0","id":"client-7","result":' + result + b"}\n"


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


# -- in-process tools with a plain call (popoto-memory's) ---------------------------------


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    pytest.importorskip("popoto")
    from helpers.redis_server import REDIS_SERVER, SKIP_REASON, start_redis

    if REDIS_SERVER is None:
        pytest.skip(SKIP_REASON)
    proc, port = start_redis(tmp_path_factory.mktemp("redis"))
    yield f"redis://127.0.0.1:{port}/1"
    proc.terminate()
    proc.wait(timeout=10)


POPOTO_AND_MEMORY = """
    servers:
      recall:
        server: popoto-memory
        namespace: pp
        tools: {{exclude: [memory_feedback]}}
        settings: {{backend: redis, url: "{url}", agent_id: fastpath}}
      notes:
        server: memory-tools
        settings: {{memory_dir: ./notes}}
"""


async def test_plain_in_process_tools_are_fast_path_targets(write_config, redis_url) -> None:
    """popoto-memory's tools (a plain call, a server with fastmcp's defaults) skip fastmcp;
    memory-tools' (FunctionTools) and filtered-out tools do not."""
    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config
    from doc_processing_std_tools.launcher.external.relay import fast_path_of

    composition = await compose(load_config(write_config(POPOTO_AND_MEMORY.format(url=redis_url))))
    try:
        fast = fast_path_of(composition.root)
        assert fast is not None
        targets = fast._relay.targets()
        plain = {name: t.name for name, t in targets.items() if t.plain_call is not None}
        assert plain == {
            "pp_memory_search": "memory_search",
            "pp_memory_save": "memory_save",
            "pp_memory_status": "memory_status",
        }
        assert not any(name.endswith("_memory") for name in targets)  # memory-tools
    finally:
        await composition.aclose()


async def test_a_server_with_its_own_middleware_keeps_fastmcps_path(
    write_config, redis_url
) -> None:
    from fastmcp.server.middleware import Middleware

    from doc_processing_std_tools.launcher.compose import composition as compose_module
    from doc_processing_std_tools.launcher.config import load_config
    from doc_processing_std_tools.launcher.external.relay import fast_path_of

    loaded = load_config(write_config(POPOTO_AND_MEMORY.format(url=redis_url)))
    build = compose_module.build_servers

    async def build_with_middleware(*args, **kwargs):
        mounts, skipped = await build(*args, **kwargs)
        for mount in mounts:
            mount.server.add_middleware(Middleware())  # a server that must see its calls
        return mounts, skipped

    compose_module.build_servers = build_with_middleware
    try:
        composition = await compose_module.compose(loaded)
    finally:
        compose_module.build_servers = build
    try:
        fast = fast_path_of(composition.root)
        assert fast is not None
        assert not any(t.plain_call for t in fast._relay.targets().values())
    finally:
        await composition.aclose()


async def test_middleware_added_to_the_root_later_sees_every_call(write_config, tmp_path) -> None:
    """The fast path's table is kept between calls: middleware added to the composed root
    afterwards still empties it, so that every call reaches that middleware."""
    import sys

    from fastmcp.server.middleware import Middleware

    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config
    from doc_processing_std_tools.launcher.external.relay import fast_path_of

    server = SERVERS / "external_server.py"
    config = write_config(
        f"servers:\n  ext:\n    command: {sys.executable}\n    args: [{server}, {tmp_path / 'n'}]\n"
        "    namespace: ext\n"
    )
    composition = await compose(load_config(config))
    try:
        fast = fast_path_of(composition.root)
        assert fast is not None
        assert "ext_bump" in fast._relay.fast_targets()
        composition.root.add_middleware(Middleware())  # one that must see its calls
        assert fast._relay.fast_targets() == {}
        fast.negotiated({"protocolVersion": "2025-11-25"})
        fast._loop = asyncio.get_running_loop()  # (as bind sets it: take looks no further)
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ext_bump"}}
        assert not fast.take(json.dumps(call).encode(), on_loop=True)
    finally:
        await composition.aclose()


async def test_a_plain_call_keeps_the_launchers_rules_and_the_sdks_reply(
    write_config, redis_url, dispatch_calls
) -> None:
    """Lines taken by the fast path: the write runs on the event loop under the process lock,
    memory_status in a worker thread, and the reply is the line the SDK path writes."""
    import anyio
    from fastmcp import Client

    from doc_processing_std_tools import locking
    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config
    from doc_processing_std_tools.launcher.external.relay import fast_path_of

    seen = dispatch_calls
    composition = await compose(load_config(write_config(POPOTO_AND_MEMORY.format(url=redis_url))))
    replies: list[bytes] = []
    answered: list[object] = []
    fast = fast_path_of(composition.root)
    assert fast is not None
    try:
        async with Client(composition.root) as client, anyio.create_task_group() as group:
            fast.bind(group, replies.append, lambda _id: None, answered.append)
            fast.negotiated({"protocolVersion": "2025-11-25"})
            sdk = await client.call_tool("pp_memory_save", {"content": ""}, raise_on_error=False)
            calls = [
                ("pp_memory_save", {"content": "the fast path saved this"}),
                ("pp_memory_save", {"content": ""}),
                ("pp_memory_status", {}),
            ]
            for i, (name, args) in enumerate(calls, start=1):
                line = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": i,
                        "method": "tools/call",
                        "params": {"name": name, "arguments": args},
                    }
                ).encode()
                assert fast.take(line, on_loop=True)
                with anyio.fail_after(20):
                    while i not in answered:
                        await anyio.sleep(0.01)
            group.cancel_scope.cancel()
    finally:
        await composition.aclose()
    saved, empty, status = (json.loads(reply) for reply in replies)
    assert saved == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "content": [{"text": "Saved 1 memory record(s).", "type": "text"}],
            "isError": False,
        },
    }
    assert empty["result"]["isError"] is True
    assert empty["result"]["content"][0]["text"] == sdk.content[0].text
    assert "agent: fastpath" in status["result"]["content"][0]["text"]
    assert seen[1:] == [  # (the first is the SDK path's call)
        ("memory_save", True, True),
        ("memory_save", True, True),
        ("memory_status", False, False),
    ]
    assert not locking.PROCESS_LOCK.locked()


# -- relayed calls on the fast path take the process lock -------------------------------------


async def test_a_relayed_call_holds_the_lock_while_it_runs_and_waits_its_turn(
    write_config, tmp_path
) -> None:
    """The process lock is free: the call runs in a task, holding it. The lock is taken: the
    call waits in its task for its turn, then runs."""
    import sys

    import anyio

    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config
    from doc_processing_std_tools.launcher.external.relay import fast_path_of
    from doc_processing_std_tools.locking import PROCESS_LOCK

    server = SERVERS / "external_server.py"
    counter = tmp_path / "count"
    config = write_config(
        f"servers:\n  ext:\n    command: {sys.executable}\n    args: [{server}, {counter}]\n"
        "    namespace: ext\n"
    )
    composition = await compose(load_config(config))
    replies: list[bytes] = []
    answered: list[object] = []
    fast = fast_path_of(composition.root)
    assert fast is not None

    def call(request_id: int) -> bytes:
        return json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": "ext_bump", "arguments": {}},
            }
        ).encode()

    async def wait_for(request_id: int) -> None:
        with anyio.fail_after(20):
            while request_id not in answered:
                await anyio.sleep(0.005)

    try:
        async with anyio.create_task_group() as group:
            fast.bind(group, replies.append, lambda _id: None, answered.append)
            fast.negotiated({"protocolVersion": "2025-11-25"})
            assert fast.take(call(1), on_loop=True)
            assert len(fast._tasks) == 1
            await wait_for(1)
            assert not PROCESS_LOCK.locked()

            assert PROCESS_LOCK.try_acquire()  # someone else's write
            assert fast.take(call(2), on_loop=True)
            await anyio.sleep(0.3)
            assert 2 not in answered and counter.read_text() == "1"  # still waiting
            PROCESS_LOCK.release()
            await wait_for(2)
            group.cancel_scope.cancel()
    finally:
        await composition.aclose()
    assert [json.loads(reply)["result"]["structuredContent"] for reply in replies] == [
        {"result": 1},
        {"result": 2},
    ]
    assert not PROCESS_LOCK.locked()


@pytest.mark.parametrize(
    ("message", "taken"),
    [
        ({"params": {"name": "ext_echo", "arguments": {}}}, True),
        ({"params": {"arguments": {"text": '"name": "ext_echo"'}, "name": "write_memory"}}, False),
        ({"params": {"name": "write_memory", "arguments": {"value": "x" * 100_000}}}, False),
        ({"params": {"name": 't\u00e9"x', "arguments": {}}}, True),
        ({"params": {"arguments": {"name": "ext_echo"}, "name": "write_memory"}}, True),
    ],
)
def test_a_call_is_recognised_by_its_tool_name_before_it_is_parsed(message, taken) -> None:
    """Long calls of tools the fast path does not serve are left alone without a json.loads
    (a nested "name" naming a target only costs that parse: the full check decides)."""
    from doc_processing_std_tools.launcher.external.fast_path import _names_a_target

    targets = {"ext_echo": object(), 't\u00e9"x': object()}
    for ensure_ascii in (True, False):
        line = json.dumps(message, ensure_ascii=ensure_ascii).encode()
        assert _names_a_target(line, targets) is taken
    assert not _names_a_target(json.dumps(message).encode(), {})


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        (b'{"method":"tools/call","id":1}', {"method": "tools/call", "id": 1}),
        (b'{"method":"tools/call","id":1} \r', {"method": "tools/call", "id": 1}),
        (b'{"method":"tools/call","id":1}{"id":2}', None),  # two values
        (b'{"method":"tools/call","id":1} x', None),
        (b' {"method":"tools/call","id":1}', None),  # (the SDK path reads it)
        (b'{"method":"tools/list","id":1}', None),
        (b'[{"method":"tools/call","id":1}]', None),
        (b'{"method":"tools/call","text":"\xed\xa0\x80"}', None),  # an encoded surrogate
        (b'{"method":"tools/call","id":', None),
        (b"", None),
        (b"[" * 100_000, None),
    ],
)
def test_a_line_is_taken_only_when_it_is_one_json_object_of_that_method(line, parsed) -> None:
    from doc_processing_std_tools.launcher.external.fast_path import _message

    assert _message(line, "tools/call") == parsed
