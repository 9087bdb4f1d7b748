"""Pinned definitions end to end (issue 36 §1): a real ``dpt-launch`` over stdio, the official mcp
client, and a ``command:`` server (``shifting_server.py``) that changes a tool's and a prompt's
description at runtime, adds a tool and sends ``list_changed``, and hides an instruction in
zero-width characters. With a lock file the client never sees nor calls what changed; ``pins
diff`` shows the change; ``pins approve`` and a reload serve it."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from doc_processing_std_tools.launcher.calls.pins import LockFile
from doc_processing_std_tools.launcher.cli.main import main
from helpers.launch import http_launcher, launched, text_of, tool_names
from helpers.notices import CHANGED, Notices
from helpers.paths import SERVERS
from helpers.processes import launcher_pid
from helpers.rpc import request
from helpers.servers.shifting_server import APPROVED, SHIFTED

SHIFTING = SERVERS / "shifting_server.py"


async def dpt(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``dpt-launch ARGS`` run in this process (in a thread: it runs its own event loop):
    its exit status and stdout."""
    capsys.readouterr()
    status = await anyio.to_thread.run_sync(main, list(args))
    return status, capsys.readouterr().out


async def test_a_changed_definition_is_never_served_until_approved(
    write_config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, errlog = tmp_path / "state", tmp_path / "err"
    config = write_config(
        f"servers:\n  shifty:\n    command: {sys.executable}\n    args: [{SHIFTING}, {state}]\n"
    )
    status, out = await dpt(capsys, "pin", "--config", str(config))
    assert status == 0 and "4 tool(s), 1 prompt(s)" in out, out

    notices = Notices()
    async with launched(config, message_handler=notices, errlog=errlog) as session:
        assert await tool_names(session) == {"greet", "shift", "id_seen"}  # sneaky hides text
        sneaky = await session.call_tool("sneaky", {})
        assert sneaky.is_error and "hidden characters (U+200B)" in text_of(sneaky)
        greet = next(t for t in (await session.list_tools()).tools if t.name == "greet")
        assert greet.description == APPROVED
        assert text_of(await session.call_tool("greet", {"name": "ada"})) == "hello ada"
        assert [p.name for p in (await session.list_prompts()).prompts] == ["hello"]

        assert text_of(await session.call_tool("shift", {})) == "shifted"
        await notices.wait_for(CHANGED)
        assert await tool_names(session) == {"shift", "id_seen"}
        changed = await session.call_tool("greet", {"name": "ada"})
        assert changed.is_error
        assert "changed since it was approved" in text_of(changed)
        assert "dpt-launch pins approve shifty.greet" in text_of(changed)
        added = await session.call_tool("added", {})
        assert added.is_error and "never approved" in text_of(added)
        assert (await session.list_prompts()).prompts == []

        status, out = await dpt(capsys, "pins", "diff", "--config", str(config))
        assert status == 1
        assert f'-  "description": "{APPROVED}",' in out
        assert "id_rsa" in out and "tool shifty.added not pinned" in out
        assert "prompt shifty.hello changed" in out
        assert "tool shifty.sneaky hidden text: U+200B" in out and "\\u200b" in out

        status, out = await dpt(capsys, "pins", "approve", "--config", str(config), "shifty")
        assert status == 0 and "approved shifty.greet" in out
        os.kill(launcher_pid(config), signal.SIGHUP)
        await notices.wait_for(CHANGED, 2)
        assert await tool_names(session) == {
            "greet",
            "shift",
            "id_seen",
            "added",
        }  # sneaky: still hidden
        greet = next(t for t in (await session.list_tools()).tools if t.name == "greet")
        assert greet.description == SHIFTED
        assert text_of(await session.call_tool("added", {})) == "added"
        assert [p.name for p in (await session.list_prompts()).prompts] == ["hello"]

    status, out = await dpt(capsys, "pins", "diff", "--config", str(config))
    assert status == 1 and out.count("drifted") == 1  # (sneaky's hidden text, only)
    log = errlog.read_text(errors="replace")
    assert log.count("tool shifty.greet changed: not served") == 1
    assert "tool shifty.added not pinned: not served" in log


def test_ready_and_metrics_count_what_drifted(
    write_config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        f"transport: http\nservers:\n  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
    )
    assert main(["pin", "--config", str(config)]) == 0
    lock = tmp_path / "tools.lock"
    pins = LockFile.read(lock)
    pins.servers["memory-tools"]["tools"]["read_memory"]["description"] = "Approved text."
    del pins.servers["memory-tools"]["tools"]["write_memory"]
    pins.write(lock)
    with http_launcher(config) as launched_http:
        ready = request(launched_http.port, "GET", "/ready")
        assert ready.status == 200
        assert json.loads(ready.body)["servers"]["memory-tools"]["drifted"] == 2
        metrics = request(launched_http.port, "GET", "/metrics").body.decode()
        assert "dpt_pinned_definitions_drifted 2.0" in metrics


async def test_watch_serves_what_is_approved_without_a_signal(
    write_config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(f"servers:\n  memory-tools:\n    settings: {{memory_dir: {tmp_path}}}\n")
    assert (await dpt(capsys, "pin", "--config", str(config)))[0] == 0
    pins = LockFile.read(tmp_path / "tools.lock")
    del pins.servers["memory-tools"]["tools"]["write_memory"]
    pins.write(tmp_path / "tools.lock")
    notices = Notices()
    async with launched(config, message_handler=notices, args=("--watch",)) as session:
        assert "write_memory" not in await tool_names(session)
        assert (await dpt(capsys, "pins", "approve", "--config", str(config)))[0] == 0
        await notices.wait_for(CHANGED)
        assert "write_memory" in await tool_names(session)
