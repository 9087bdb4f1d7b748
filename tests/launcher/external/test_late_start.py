"""A child slow to answer ``initialize`` does not hold up the launcher's own (issue 26 §4.6).

Two children (``late_child.py``) answer ``initialize`` only once the test creates their gate
file, with a ``start_timeout`` far beyond any client's patience; memory-tools is mounted
beside them. The launcher answers ``initialize`` while neither child has answered (their
gates do not exist yet), memory-tools serves, a call to a tool of a child still starting
waits within its ``timeout`` (an error when that runs out), and a child that comes up late
appears through ``notifications/tools/list_changed``; one that never answers is given up at
its ``start_timeout`` with one warning.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from helpers.config_entries import memory
from helpers.launch import launched, text_of, tool_names
from helpers.notices import CHANGED, Notices
from helpers.paths import SERVERS

LATE = SERVERS / "late_child.py"


def gated(name: str, gate: Path, timeout: float, start_timeout: float = 600) -> str:
    return (
        f"  {name}:\n    command: {sys.executable}\n    args: [{LATE}, {gate}]\n"
        f"    namespace: {name}\n    start_timeout: {start_timeout}\n    timeout: {timeout}\n"
    )


async def test_initialize_is_answered_while_a_child_still_starts(
    write_config, tmp_path: Path
) -> None:
    slow_gate, stuck_gate = tmp_path / "slow-gate", tmp_path / "stuck-gate"
    config = write_config(
        "start_grace: 0.1\nservers:\n"
        + gated("slow", slow_gate, 60)
        + gated("stuck", stuck_gate, 0.2)
        + gated("never", tmp_path / "never-gate", 60, start_timeout=0.5)
        + memory(tmp_path / "m")
    )
    notices = Notices()
    errlog = tmp_path / "stderr"
    async with launched(config, message_handler=notices, errlog=errlog) as session:
        # answered: neither child can have answered its initialize (no gate exists)
        assert not slow_gate.exists() and not stuck_gate.exists()
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert "write_memory" in names and not {"slow_echo", "stuck_echo"} & names
        written = await session.call_tool("write_memory", {"key": "k", "value": "v"})
        assert not written.is_error, text_of(written)

        stuck = await session.call_tool("stuck_echo", {"text": "x"})
        assert stuck.is_error
        assert text_of(stuck).startswith("server 'stuck' is still starting"), text_of(stuck)

        answers: list[str] = []

        async def call_slow() -> None:
            answers.append(text_of(await session.call_tool("slow_echo", {"text": "hi"})))

        async with anyio.create_task_group() as group:
            group.start_soon(call_slow)  # waits for 'slow' to come up, within its timeout
            await anyio.sleep(0.2)
            slow_gate.touch()
            await notices.wait_for(CHANGED)
        assert answers == ["echo hi"]
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert "slow_echo" in names and "stuck_echo" not in names
        assert text_of(await session.call_tool("slow_echo", {"text": "again"})) == "echo again"

        # 'never' is given up at its start_timeout: one warning says so, and nothing of it shows.
        with anyio.fail_after(30):
            while "servers.never not mounted" not in errlog.read_text():
                await anyio.sleep(0.05)
        assert "no answer to initialize within 0.5 s" in errlog.read_text()
        assert not any(n.startswith("never_") for n in await tool_names(session))


async def test_a_hung_server_does_not_hold_the_first_list(write_config, tmp_path: Path) -> None:
    """Issue 38 §2: with one child hanging on ``initialize``, the first list comes once the
    healthy children are up plus a margin (about 1.3 s from spawn on a quiet machine), not at
    ``start_grace`` (30 s here, so that a loaded machine's slow imports cannot pass for it),
    holding their tools; the hung one's follow with ``list_changed`` once it answers."""
    ready, hung = tmp_path / "ready-gate", tmp_path / "hung-gate"
    ready.touch()
    config = write_config(
        "start_grace: 30\nservers:\n"
        + gated("one", ready, 60)
        + gated("two", ready, 60)
        + gated("hung", hung, 60)
        + memory(tmp_path / "m")
    )
    notices = Notices()
    began = anyio.current_time()
    async with launched(config, message_handler=notices) as session:
        names = {tool.name for tool in (await session.list_tools()).tools}
        first_list = anyio.current_time() - began
        assert first_list < 15, f"first list after {first_list:.2f} s"
        assert {"one_echo", "two_echo", "write_memory"} <= names and "hung_echo" not in names
        hung.touch()
        await notices.wait_for(CHANGED)
        assert "hung_echo" in await tool_names(session)
        assert text_of(await session.call_tool("hung_echo", {"text": "up"})) == "echo up"
