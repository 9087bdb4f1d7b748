"""Children that misbehave cannot hurt the launcher (issue 26, section 4): real ``dpt-launch``
processes with real children."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from conftest import launched, text_of

TESTS = Path(__file__).resolve().parent
SERIAL = TESTS / "serial_child.py"


async def test_a_busy_child_is_not_taken_for_hung_while_its_call_is_within_its_timeout(
    write_config,
) -> None:
    """A child that handles one message at a time answers the health ping only after its call:
    that call, well within its timeout, outlasts the ping limit and still succeeds, on the same
    process."""
    config = write_config(
        f"servers:\n  serial:\n    command: {sys.executable}\n    args: [{SERIAL}]\n"
        "    timeout: 60\n    ping_timeout: 0.5\n"
    )
    async with launched(config) as session:
        before = text_of(await session.call_tool("whoami", {}))
        slow = await session.call_tool("slow", {"seconds": 5})
        assert not slow.is_error, text_of(slow)
        assert text_of(slow) == "done"
        assert text_of(await session.call_tool("whoami", {})) == before


SLOW_WRITER = '''
import anyio
from fastmcp import FastMCP

server = FastMCP("slow")


@server.tool
async def hold(seconds: float) -> str:
    """Changes state (not read-only): the launcher holds the process lock while it runs."""
    await anyio.sleep(seconds)
    return "held"
'''


async def test_a_self_locking_server_waits_for_the_lock_no_longer_than_its_timeout(
    write_config, tmp_path: Path
) -> None:
    """memory-tools takes the process lock itself, in a worker thread: its wait behind another
    server's slow write ends at its own timeout, with nothing written; once the lock is free
    the same write succeeds."""
    (tmp_path / "slow_writer.py").write_text(SLOW_WRITER)
    memory_dir = tmp_path / "mem"
    config = write_config(
        "servers:\n  slow:\n    module: slow_writer:server\n    namespace: slow\n"
        "  memory-tools:\n    timeout: 1\n"
        f"    settings: {{memory_dir: {memory_dir}}}\n"
    )
    async with launched(config) as session:
        outcome: dict[str, object] = {}

        async def hold() -> None:
            outcome["hold"] = await session.call_tool("slow_hold", {"seconds": 4})

        async with anyio.create_task_group() as group:
            group.start_soon(hold)
            await anyio.sleep(0.5)
            written = await session.call_tool("write_memory", {"key": "k", "value": "v"})
            assert written.is_error, text_of(written)
            assert "did not start within its timeout of 1 s" in text_of(written)
            assert "process lock" in text_of(written) and "nothing was done" in text_of(written)
            assert "hold" not in outcome  # (the slow write still held the lock)
            read = await session.call_tool("read_memory", {"key": "k"})
            assert read.is_error, text_of(read)
        assert text_of(outcome["hold"]) == "held"
        again = await session.call_tool("write_memory", {"key": "k", "value": "v"})
        assert not again.is_error, text_of(again)
        assert text_of(await session.call_tool("read_memory", {"key": "k"})) == "v"
