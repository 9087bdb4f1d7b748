"""A mounted server that changes its lists while serving gets the launch-time rules (issue 26 §2).

A real child (``growing_server.py``) adds ``write_memory`` (memory-tools' name) and ``extra``
during a call and sends ``notifications/tools/list_changed``. Mounted with no namespace and
before memory-tools, it must not take ``write_memory`` over: the existing tool stays, one
warning names both servers, ``extra`` is exposed, and the client is told the list changed.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from helpers.config_entries import external, memory
from helpers.launch import launched, text_of, tool_names
from helpers.notices import CHANGED, Notices
from helpers.paths import SERVERS
from helpers.processes import launcher_pid

GROWING = SERVERS / "growing_server.py"


def growing(record: Path, extra: str = "") -> str:
    """The ``grower`` entry (first under ``servers:``), with *extra* YAML lines of its own."""
    return f"  grower:\n    command: {sys.executable}\n    args: [{GROWING}, {record}]\n{extra}"


def takeover_warnings(errlog: Path) -> list[str]:
    text = errlog.read_text(encoding="utf-8", errors="replace")
    return [
        line
        for line in text.splitlines()
        if "write_memory" in line
        and "'grower'" in line
        and "'memory-tools'" in line
        and "reload refused" not in line
    ]


async def assert_memory_keeps_write_memory(session, folder: Path, record: Path, key: str) -> None:
    """One ``write_memory`` listed, memory-tools'; a call to it lands in the memory folder."""
    listed = [tool for tool in (await session.list_tools()).tools if tool.name == "write_memory"]
    assert len(listed) == 1
    assert "memory directory" in (listed[0].description or "")  # memory-tools' own text
    result = await session.call_tool("write_memory", {"key": key, "value": "secret"})
    assert not result.is_error, text_of(result)
    assert (folder / f"{key}.json").exists()
    assert not record.exists() or key not in record.read_text()  # never the child's


async def test_a_child_cannot_take_over_a_tool_at_runtime(write_config, tmp_path: Path) -> None:
    folder, record, errlog = tmp_path / "m", tmp_path / "calls", tmp_path / "err"
    config = write_config("servers:\n" + growing(record) + memory(folder))
    notices = Notices()
    async with launched(config, message_handler=notices, errlog=errlog) as session:
        before = await tool_names(session)
        assert {"grow", "write_memory"} <= before and "extra" not in before
        assert text_of(await session.call_tool("grow", {})) == "grown"
        await notices.wait_for(CHANGED)

        assert await tool_names(session) == before | {"extra"}
        assert text_of(await session.call_tool("extra", {})) == "extra from the growing server"
        await assert_memory_keeps_write_memory(session, folder, record, "secret1")
        await assert_memory_keeps_write_memory(session, folder, record, "secret2")  # (tables)
    warnings = takeover_warnings(errlog)
    assert len(warnings) == 1, warnings
    assert "namespace" in warnings[0]


@pytest.mark.slow
async def test_a_reload_does_not_hand_the_tool_over(write_config, tmp_path: Path) -> None:
    folder, record, errlog = tmp_path / "m", tmp_path / "calls", tmp_path / "err"
    text = "servers:\n" + growing(record) + memory(folder)
    config = write_config(text)
    notices = Notices()
    async with launched(config, message_handler=notices, errlog=errlog) as session:
        before = await tool_names(session)
        await session.call_tool("grow", {})
        await notices.wait_for(CHANGED)
        told = notices.methods.count(CHANGED)

        # The reload keeps both servers and starts a third: it is accepted, and changes no owner.
        config.write_text(text + external("three", tmp_path / "c3"))
        os.kill(launcher_pid(config), signal.SIGHUP)
        await notices.wait_for(CHANGED, told + 1)
        names = await tool_names(session)
        assert "three_bump" in names and "extra" in names
        await assert_memory_keeps_write_memory(session, folder, record, "after-reload")

        # Nor does a reload that restarts memory-tools (its entry changed): the child's live
        # write_memory collides with it, so the reload is refused and the old one serves on.
        config.write_text(
            "servers:\n" + growing(record) + memory(folder).replace("\n", "\n    lock: always\n", 1)
        )
        os.kill(launcher_pid(config), signal.SIGHUP)
        with anyio.fail_after(30):
            while "reload refused" not in errlog.read_text():
                await anyio.sleep(0.1)
        assert await tool_names(session) == names
        await assert_memory_keeps_write_memory(session, folder, record, "after-refused")
        assert before <= names
    assert len(takeover_warnings(errlog)) == 1, takeover_warnings(errlog)
    refusals = [line for line in errlog.read_text().splitlines() if "reload refused" in line]
    assert len(refusals) == 1 and "'grower' and 'memory-tools'" in refusals[0], refusals


@pytest.mark.slow
async def test_a_new_tool_gets_the_namespace_and_the_filter(write_config, tmp_path: Path) -> None:
    folder, record = tmp_path / "m", tmp_path / "calls"
    rules = "    namespace: grower\n    tools: {exclude: [extra]}\n"
    config = write_config("servers:\n" + growing(record, rules) + memory(folder))
    notices = Notices()
    async with launched(config, message_handler=notices) as session:
        before = await tool_names(session)
        assert "grower_grow" in before
        await session.call_tool("grower_grow", {})
        await notices.wait_for(CHANGED)

        assert await tool_names(session) == before | {"grower_write_memory"}
        hidden = await session.call_tool("grower_extra", {})
        assert hidden.is_error
        assert "stored by" in text_of(
            await session.call_tool("grower_write_memory", {"key": "k", "value": "v"})
        )
        assert record.read_text() == "k=v\n"
        await assert_memory_keeps_write_memory(session, folder, record, "plain")
