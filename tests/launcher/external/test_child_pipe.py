"""An external command's pipes (launcher/external/child_pipe.py) with a real child process.

Replies to the launcher's own calls are picked off the child's stdout as the bytes
arrive, even split across writes; every other line reaches the SDK session unchanged;
a call still waiting when stdout ends is failed, not left hanging.
"""

from __future__ import annotations

import os
import sys

import anyio
import pytest

from doc_processing_std_tools.launcher.external.child_pipe import ChildPipe, ConnectionLost
from doc_processing_std_tools.seams.stdio_children import asyncio_pipes, spawn_stdio_child

CHILD = r"""
import sys, time
out = sys.stdout.buffer
sys.stdin.readline()                       # the launcher's request
out.write(b'{"jsonrpc":"2.0","id":"dpt~1","res'); out.flush(); time.sleep(0.2)
out.write(b'ult":{"content":[],"isError":false}}\n{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n')
out.flush()
sys.stdin.readline()                       # a second request, never answered
"""


async def test_replies_are_routed_as_they_arrive_and_the_rest_goes_on_unchanged() -> None:
    process = await spawn_stdio_child(
        sys.executable, ["-c", CHILD], dict(os.environ), sys.stderr, None
    )
    pipe = ChildPipe(process)
    _writer, stdout = asyncio_pipes(process)
    if stdout is None:
        pytest.skip("this anyio/asyncio has no pipe transport to route on")
    assert type(stdout.get_protocol()).__name__ == "_RoutingProtocol"
    send, receive = anyio.create_memory_object_stream(10)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(pipe.read, send)
            first = pipe.open_call()
            await pipe.send(b'{"jsonrpc":"2.0","id":"dpt~1","method":"tools/call"}\n')
            line, parsed = await first.reply()
            assert line == b'{"jsonrpc":"2.0","id":"dpt~1","result":{"content":[],"isError":false}}'
            assert parsed is None
            message = await receive.receive()  # the child's own notification: for the SDK
            assert message.message.method == "notifications/tools/list_changed"
            second = pipe.open_call()
            await pipe.send(b'{"jsonrpc":"2.0","id":"dpt~2","method":"tools/call"}\n')
            with pytest.raises(ConnectionLost):
                await second.reply()  # the child exits without answering
            async for _ in receive:  # stdout ended: the SDK's stream ends too
                pass
    await process.wait()
    assert pipe.closed


NODE_CHILD = r"""
import sys
out = sys.stdout.buffer
sys.stdin.readline()
out.write(b'{"result":{"content":[]},"jsonrpc":"2.0","id":"dpt~1"}\n')
out.flush()
sys.stdin.readline()
out.write(b'{"result":{"x":{"id":"dpt~2"}},"jsonrpc":"2.0","id":"dpt~2"}\n')
out.flush()
"""


async def test_a_reply_written_result_first_is_routed_without_a_parse() -> None:
    """(As Node's SDK servers write replies: the id last.)"""
    process = await spawn_stdio_child(
        sys.executable, ["-c", NODE_CHILD], dict(os.environ), sys.stderr, None
    )
    pipe = ChildPipe(process)
    send, _receive = anyio.create_memory_object_stream(10)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(pipe.read, send)
            for key in ("dpt~1", "dpt~2"):
                call = pipe.open_call()
                await pipe.send(b'{"jsonrpc":"2.0","id":"' + key.encode() + b'","method":"x"}\n')
                line, parsed = await call.reply()
                assert line.endswith(b'"id":"' + key.encode() + b'"}')
                assert parsed is None
    await process.wait()


CUSTOM_CHILD = r"""
import sys
out = sys.stdout.buffer
sys.stdin.readline()                       # the launcher's request
out.write(b'{"jsonrpc":"2.0","method":"notifications/x/custom","params":{"n":1}}\n')
out.write(b'{"jsonrpc":"2.0","id":"dpt~1","result":{"content":[]}}\n')
out.write(b'{"jsonrpc":"2.0","method":"notifications/x/custom","params":{"n":2}}\n')
out.write(b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n')
out.flush()
sys.stdin.readline()
"""


async def test_notifications_no_mcp_version_defines_are_handed_on_in_order() -> None:
    """The SDK session would drop them: one sent while a fast-path call waits is written to
    the client at once, ahead of the call's reply; one sent outside goes to the supervisor's
    handler; a notification the spec defines still reaches the SDK session."""
    process = await spawn_stdio_child(
        sys.executable, ["-c", CUSTOM_CHILD], dict(os.environ), sys.stderr, None
    )
    pipe = ChildPipe(process)
    written: list[bytes] = []
    handed: list[tuple[str, object]] = []

    async def on_notification(method: str, params: object) -> None:
        handed.append((method, params))

    pipe.on_notification = on_notification
    pipe.write_note = written.append
    send, receive = anyio.create_memory_object_stream(10)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(pipe.read, send)
            call = pipe.open_call()
            await pipe.send(b'{"jsonrpc":"2.0","id":"dpt~1","method":"tools/call"}\n')
            await call.reply()
            assert written == [
                b'{"jsonrpc":"2.0","method":"notifications/x/custom","params":{"n":1}}\n'
            ]
            pipe.forget(call)
            message = await receive.receive()
            assert message.message.method == "notifications/tools/list_changed"
            assert handed == [("notifications/x/custom", {"n": 2})]
            await pipe.send(b"\n")
            async for _ in receive:
                pass
    await process.wait()
