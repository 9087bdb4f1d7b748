"""No slow filesystem call stalls the rest of a real ``dpt-launch`` (stdio, official mcp client).

The slowest filesystem call left is an ``edit_file`` with many scattered edits on a
file at the read limit: seconds of matching and diffing, all done before it takes
the process lock (inside dpt-launch the launcher still holds the process lock around
every call that may write, so there other writers wait for it). While it runs, reads
of the filesystem and of another server answer, and SIGTERM stops the launcher. Not timed as a benchmark: the checks are about order
(the other calls come back while the edit is still running), with generous bounds.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import anyio
import pytest

from helpers.launch import launched, launcher_command, text_of
from helpers.rpc import initialize, message, send

LINES = 150_000
EDITS = 150


def big_file(root: Path) -> list[str]:
    lines = [f"    line {i} = value({i})" for i in range(LINES)]
    (root / "big.py").write_text("\n".join(lines) + "\n")
    return lines


def config_text(root: Path, memory: Path) -> str:
    return f"""\
        servers:
          files:
            server: filesystem
            settings:
              roots: [{root}]
          memory:
            server: memory-tools
            settings:
              memory_dir: {memory}
        """


def slow_edit(lines: list[str]) -> dict[str, object]:
    edits = [{"oldText": line, "newText": line + "  # edited"} for line in lines[:: LINES // EDITS]]
    return {"path": "big.py", "edits": edits}


async def test_other_servers_answer_while_a_slow_edit_runs(write_config, tmp_path: Path) -> None:
    root, memory = tmp_path / "root", tmp_path / "memory"
    root.mkdir()
    lines = big_file(root)
    config = write_config(config_text(root, memory))
    async with launched(config) as session:
        await session.call_tool("write_memory", {"key": "k0", "value": "v0"})  # warm up
        edit_done = anyio.Event()
        answered_while_running: list[str] = []

        async def edit() -> None:
            result = await session.call_tool("edit_file", slow_edit(lines))
            assert not result.is_error, text_of(result)
            edit_done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(edit)
            await (
                anyio.wait_all_tasks_blocked()
            )  # the edit's request is sent: it waits for its reply
            with anyio.fail_after(30):
                for i in range(3):
                    listed = await session.call_tool("list_allowed_directories", {})
                    assert str(root) in text_of(listed)
                    read = await session.call_tool("read_memory", {"key": "k0"})
                    assert "v0" in text_of(read)
                    if not edit_done.is_set():
                        answered_while_running.append(f"round {i}")
            with anyio.fail_after(120):
                await edit_done.wait()
        assert answered_while_running, "the edit finished before the other calls: make it slower"
        wrote = await session.call_tool("write_memory", {"key": "k1", "value": "v1"})
        assert not wrote.is_error, text_of(wrote)
    text = (root / "big.py").read_text()
    assert text.count("  # edited") == EDITS


def next_reply(process: subprocess.Popen[bytes]) -> dict:
    """The next reply on stdout, whatever its id (notifications skipped)."""
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        assert line, "the launcher closed stdout without answering"
        reply = json.loads(line)
        if "id" in reply:
            return reply


@pytest.mark.slow  # (a lifecycle test: a signal during a slow edit)
def test_sigterm_stops_the_launcher_while_a_slow_edit_runs(write_config, tmp_path: Path) -> None:
    """A raw JSON-RPC client over pipes, so the test controls exactly when SIGTERM is sent."""
    root, memory = tmp_path / "root", tmp_path / "memory"
    root.mkdir()
    lines = big_file(root)
    config = write_config(config_text(root, memory))
    process = subprocess.Popen(
        [*launcher_command(), "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    assert process.stdin is not None and process.stdout is not None

    try:
        assert "result" in initialize(process)
        quick = {"name": "list_allowed_directories", "arguments": {}}
        send(
            process,
            message("notifications/initialized"),
            message("tools/call", {"name": "edit_file", "arguments": slow_edit(lines)}, id=2),
            message("tools/call", quick, id=3),
        )
        # The quick call answered: the launcher has read the edit's line and runs the edit.
        assert next_reply(process)["id"] == 3, "the edit finished first: make it slower"
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)  # over stdio: stop serving, cancel what runs
        code = process.wait(timeout=60)  # (the edit's thread may still finish: within the grace)
        assert code in (0, -signal.SIGTERM, 128 + signal.SIGTERM)
        assert process.stdout is not None
        rest = [json.loads(line) for line in process.stdout.read().splitlines()]
        assert all(reply.get("id") in (None, 2) for reply in rest), rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not [p for p in root.iterdir() if p.name.startswith(".dpt-tmp-")]
    assert (root / "big.py").read_text().count("  # edited") in (0, EDITS)  # all or nothing
