"""Reload on SIGHUP through a real ``dpt-launch`` over stdio: only what changed changes."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from helpers.config_entries import external
from helpers.launch import launched, text_of, tool_names
from helpers.paths import SERVERS
from helpers.processes import child_pids, launcher_pid
from helpers.waiting import until

EXTERNAL = SERVERS / "external_server.py"


def refusals(errlog: Path) -> int:
    """How many reloads the launcher writing *errlog* has refused so far (its log says so)."""
    return errlog.read_text(errors="replace").count("reload refused")


async def refused_reload_changes_nothing(
    session, config: Path, errlog: Path, new_text: str
) -> None:
    """Write *new_text* over *config* and SIGHUP: once the launcher logs the refusal, the same
    tools, and memory-tools still works."""
    before = await tool_names(session)
    refused = refusals(errlog)
    config.write_text(new_text)
    os.kill(launcher_pid(config), signal.SIGHUP)
    await until(lambda: refusals(errlog) > refused, "the reload to be refused", timeout=60)
    assert await tool_names(session) == before
    written = await session.call_tool("write_memory", {"key": "k", "value": "v"})
    assert not written.is_error, text_of(written)


async def test_sighup_adds_a_server_keeps_the_others_and_tells_the_client(
    write_config, tmp_path: Path
) -> None:
    memory = f"  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
    config = write_config("servers:\n" + memory + external("one", tmp_path / "c1"))
    notices: list[str] = []

    async def on_message(message) -> None:
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if method:
            notices.append(method)

    errlog = tmp_path / "stderr.log"
    async with launched(config, message_handler=on_message, errlog=errlog) as session:
        before = await tool_names(session)
        assert "one_bump" in before and "write_memory" in before
        pid_one = int(text_of(await session.call_tool("one_whoami", {})))

        config.write_text(
            "servers:\n"
            + memory
            + external("one", tmp_path / "c1")
            + external("two", tmp_path / "c2")
        )
        os.kill(launcher_pid(config), signal.SIGHUP)
        with anyio.fail_after(30):
            while "two_bump" not in await tool_names(session):
                await anyio.sleep(0.2)
        assert await tool_names(session) == before | {
            "two_bump",
            "two_whoami",
            "two_nap",
            "two_nap_and_mark",
            "two_hold",
            "two_delete_everything",
        }
        assert int(text_of(await session.call_tool("one_whoami", {}))) == pid_one  # kept
        assert int(text_of(await session.call_tool("two_whoami", {}))) != pid_one
        assert "notifications/tools/list_changed" in notices

        # A broken config changes nothing: same tools, same child, still serving.
        config.write_text("servers:\n  memory-tools: {settings: {memory_dirr: x}}\n")
        os.kill(launcher_pid(config), signal.SIGHUP)
        await until(lambda: refusals(errlog) == 1, "the broken config to be refused")
        assert "two_bump" in await tool_names(session)
        assert int(text_of(await session.call_tool("one_whoami", {}))) == pid_one

        # Removing a server closes it; the rest keeps working.
        config.write_text("servers:\n" + memory + external("one", tmp_path / "c1"))
        os.kill(launcher_pid(config), signal.SIGHUP)
        with anyio.fail_after(30):
            while "two_bump" in await tool_names(session):
                await anyio.sleep(0.2)
        written = await session.call_tool("write_memory", {"key": "k", "value": "v"})
        assert not written.is_error, text_of(written)
        assert int(text_of(await session.call_tool("one_whoami", {}))) == pid_one


@pytest.mark.slow
async def test_a_reload_that_would_collide_changes_nothing(write_config, tmp_path: Path) -> None:
    memory = f"  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
    config = write_config("servers:\n" + memory)
    errlog = tmp_path / "stderr.log"
    async with launched(config, errlog=errlog) as session:
        clash = (
            f"  mem2:\n    command: {sys.executable}\n"
            "    args: [-m, doc_processing_std_tools.memory]\n"
        )
        await refused_reload_changes_nothing(session, config, errlog, "servers:\n" + memory + clash)


@pytest.mark.slow  # a failing start
async def test_a_reload_whose_new_server_fails_changes_nothing(
    write_config, tmp_path: Path
) -> None:
    """A new server whose lifespan raises (not a config or start error the reload expects)
    refuses the reload; the launcher serves on."""
    (tmp_path / "boom.py").write_text(
        "from contextlib import asynccontextmanager\n"
        "from fastmcp import FastMCP\n\n"
        "@asynccontextmanager\n"
        "async def explode(server):\n"
        "    raise RuntimeError('lifespan exploded')\n"
        "    yield\n\n"
        "server = FastMCP('boom', lifespan=explode)\n\n"
        "@server.tool\n"
        "def boom_ping() -> str:\n"
        "    return 'pong'\n"
    )
    memory = f"  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
    config = write_config("servers:\n" + memory)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    errlog = tmp_path / "stderr.log"
    async with launched(config, env=env, errlog=errlog) as session:
        boom = "  boom:\n    module: boom:server\n"
        await refused_reload_changes_nothing(session, config, errlog, "servers:\n" + memory + boom)


@pytest.mark.slow  # a signal during start-up
async def test_a_sighup_while_servers_start_reloads_once_serving(
    write_config, tmp_path: Path
) -> None:
    """SIGHUP's default action ends a process: one that arrives while an external server is
    still starting must wait for serving, then reload."""
    slow = tmp_path / "slow.sh"
    slow.write_text(f"#!/bin/sh\nsleep 2\nexec {sys.executable} {EXTERNAL} {tmp_path / 'c'}\n")
    slow.chmod(0o755)
    config = write_config(f"servers:\n  slow:\n    command: {slow}\n    namespace: slow\n")

    async def hang_up_early() -> None:
        with anyio.fail_after(30):
            while True:
                try:
                    pid = launcher_pid(config)
                    break
                except AssertionError:
                    await anyio.sleep(0.05)
        with anyio.fail_after(30):
            while not child_pids(pid):  # starting the child (2 s to go), not serving yet
                await anyio.sleep(0.05)
        os.kill(pid, signal.SIGHUP)

    async with anyio.create_task_group() as group:
        group.start_soon(hang_up_early)
        async with launched(config) as session:
            assert text_of(await session.call_tool("slow_nap", {"seconds": 0})) == "rested"
