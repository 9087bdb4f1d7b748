"""In-process composition through fastmcp's Client on ``compose()``: no subprocess, real servers.

Each mounted server must behave exactly as it does alone, and the process lock must
serialize what it promises without ever starving the worker-thread pool.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import anyio
import pytest
from fastmcp import Client

from doc_processing_std_tools.launcher.compose import compose
from doc_processing_std_tools.launcher.config import load_config
from helpers.rpc import first_tools

OVERLAP = 120  # more than the 40 worker threads AnyIO lends to sync tools


async def composed(write_config, text: str):
    return await compose(load_config(write_config(text)))


def text_of(result) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def test_masked_errors_stay_masked(write_config) -> None:
    from helpers.servers import sample_servers

    alone = sample_servers.make_secretive()
    async with Client(alone) as client:
        expected = text_of(await client.call_tool("boom", {}, raise_on_error=False))
    composition = await composed(
        write_config,
        "servers:\n  secret:\n    module: helpers.servers.sample_servers:make_secretive\n",
    )
    async with Client(composition.root) as client:
        result = await client.call_tool("boom", {}, raise_on_error=False)
    assert result.is_error
    assert "hunter2" not in text_of(result)
    assert text_of(result) == expected


async def test_overlapping_sync_calls_of_an_unlocked_server_finish_exactly(
    write_config, tmp_path
) -> None:
    composition = await composed(
        write_config,
        f"""\
        servers:
          counter:
            module: helpers.servers.sample_servers:make_sync_counter
          memory-tools:
            settings: {{memory_dir: {tmp_path / "mem"}}}
        """,
    )
    assert composition.mounts[0].locked == {"increment"}  # count is read-only
    # memory-tools takes the lock itself, in its worker thread: the launcher lets at most
    # half the thread pool's worth of its writes in at once, so the counter's holder finds a thread
    assert "memory_insert" in composition.mounts[1].locked
    async with Client(composition.root) as client:
        await client.call_tool("memory_create", {"path": "/memories/log.md", "file_text": ""})
        with anyio.fail_after(60):  # the old thread-side wait deadlocked here for good
            async with anyio.create_task_group() as group:
                for i in range(OVERLAP):
                    group.start_soon(client.call_tool, "increment", {})
                    group.start_soon(
                        client.call_tool,
                        "memory_insert",
                        {"path": "/memories/log.md", "insert_line": 0, "insert_text": f"n{i}"},
                    )
        assert (await client.call_tool("count", {})).data == OVERLAP
    lines = (tmp_path / "mem" / "log.md").read_text().split()  # (/memories is the root)
    assert sorted(lines) == sorted(f"n{i}" for i in range(OVERLAP))


async def test_memory_writes_work_without_any_extra_step(write_config, tmp_path) -> None:
    """compose() is the one step: no later call is needed before serving (it used to deadlock)."""
    composition = await composed(
        write_config,
        f"""\
        servers:
          counter:
            module: helpers.servers.sample_servers:make_sync_counter
          memory-tools:
            settings: {{memory_dir: {tmp_path / "mem"}}}
        """,
    )
    async with Client(composition.root) as client:
        with anyio.fail_after(10):
            await client.call_tool("write_memory", {"key": "k", "value": "v"})
    assert (tmp_path / "mem").is_dir()


async def test_own_middleware_and_lifespan_keep_working(write_config, tmp_path) -> None:
    marker = tmp_path / "marker"
    composition = await composed(
        write_config,
        f"""\
        servers:
          guarded:
            module: helpers.servers.sample_servers:make_guarded
            settings: {{marker: {marker}}}
            namespace: g
        """,
    )
    async with Client(composition.root) as client:
        assert marker.read_text() == "started"
        assert (await client.call_tool("g_shout", {"text": "hi"})).data == "HI"
        refused = await client.call_tool("g_shout", {"text": "forbidden"}, raise_on_error=False)
        assert refused.is_error and "own middleware" in text_of(refused)
    assert marker.read_text() == "stopped"


async def test_a_tool_added_after_start_is_served_and_locked(write_config) -> None:
    composition = await composed(
        write_config,
        "servers:\n  counter:\n    module: helpers.servers.sample_servers:make_sync_counter\n",
    )
    server = composition.mounts[0].server
    state = {"n": 0}

    @server.tool
    def late_increment() -> int:
        import time

        seen = state["n"]
        time.sleep(0.002)
        state["n"] = seen + 1
        return state["n"]

    async with Client(composition.root) as client:
        assert "late_increment" in {t.name for t in await client.list_tools()}
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                for _ in range(OVERLAP):
                    group.start_soon(client.call_tool, "late_increment", {})
    assert state["n"] == OVERLAP


async def test_exposed_names_come_from_fastmcp_namespacing(write_config) -> None:
    composition = await composed(
        write_config,
        "servers:\n  a:\n    module: helpers.servers.sample_servers:echo_server\n    namespace: ns\n",
    )
    async with Client(composition.root) as client:
        listed = {t.name for t in await client.list_tools()}
    assert listed == {t.name for t in composition.mounts[0].tools} == {"ns_echo"}


async def test_the_server_version_is_this_package_s(write_config) -> None:
    from doc_processing_std_tools import __version__

    composition = await composed(
        write_config, "servers:\n  a:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    async with Client(composition.root) as client:
        assert client.server_info.version == __version__


@pytest.mark.parametrize("waiters", [3, 60])
async def test_a_cancelled_wait_leaves_the_lock_as_it_was(waiters: int) -> None:
    from doc_processing_std_tools.locking import PROCESS_LOCK, hold_async

    async def wait_then_give_up() -> None:
        with anyio.move_on_after(0.01):
            async with hold_async():
                pytest.fail("the lock was held by the test")

    async with hold_async(), anyio.create_task_group() as group:
        for _ in range(waiters):
            group.start_soon(wait_then_give_up)
    assert not PROCESS_LOCK.locked()
    async with hold_async():  # and it can be taken again
        assert PROCESS_LOCK.locked()


async def test_a_slow_memory_edit_blocks_no_other_writer(
    write_config, tmp_path, monkeypatch
) -> None:
    """memory-tools holds the process lock only for its disk work, not the launcher for the
    whole call: while one edit is still reading and searching its file, the writes of other
    servers (one the launcher locks, one that locks itself) go through, and the edit then
    lands as well."""
    import threading

    from doc_processing_std_tools.memory import folder

    (tmp_path / "files").mkdir()
    composition = await composed(
        write_config,
        f"""\
        servers:
          counter:
            module: helpers.servers.sample_servers:make_sync_counter
          memory-tools:
            settings: {{memory_dir: {tmp_path / "mem"}}}
          filesystem:
            settings: {{roots: [{tmp_path / "files"}]}}
        """,
    )
    reading, go_on = threading.Event(), threading.Event()
    decode = folder._decode_text

    def slow_decode(data: bytes, display: str) -> str:
        if display == "/slow.md" and not reading.is_set():  # the edit's first read
            reading.set()
            go_on.wait(30)
        return decode(data, display)

    monkeypatch.setattr(folder, "_decode_text", slow_decode)
    async with Client(composition.root) as client:
        await client.call_tool("memory_create", {"path": "/slow.md", "file_text": "old\n"})
        edit: dict = {}

        async def slow_edit() -> None:
            arguments = {"path": "/slow.md", "old_str": "old", "new_str": "new"}
            edit["result"] = await client.call_tool("memory_str_replace", arguments)

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(slow_edit)
                await anyio.to_thread.run_sync(reading.wait, 30)
                with anyio.fail_after(20):  # before the fix both waited for the edit
                    assert (await client.call_tool("increment", {})).data == 1
                    await client.call_tool("write_file", {"path": "a.txt", "content": "x"})
                assert "result" not in edit  # the edit was still reading meanwhile
                go_on.set()
        finally:
            go_on.set()
    assert not edit["result"].is_error
    assert (tmp_path / "mem" / "slow.md").read_text() == "new\n"
    assert (tmp_path / "files" / "a.txt").read_text() == "x"


# A launcher over stdio answers initialize and tools/list, then reports what it imported.
FIRST_LIST_IMPORTS = """
import runpy, sys
try:
    runpy.run_module("doc_processing_std_tools.launcher.cli", run_name="__main__")
finally:
    sys.stderr.write("\\nIMPORTED " + repr(sorted({m.split('.')[0] for m in sys.modules})) + "\\n")
"""


def test_the_first_tools_list_builds_no_session_state_store(write_config, tmp_path) -> None:
    """fastmcp's session-state store (py-key-value-aio, 0.15-0.4 s) waits for its first write."""
    config = write_config(
        f"servers:\n  memory:\n    server: memory-tools\n"
        f"    settings: {{memory_dir: {tmp_path / 'mem'}}}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", FIRST_LIST_IMPORTS, "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=os.environ,
    )
    tools = first_tools(proc)
    assert any(tool["name"] == "memory_view" for tool in tools), json.dumps(tools)[:200]
    _, err = proc.communicate(timeout=30)
    imported = err.decode().rpartition("IMPORTED ")[2]
    assert "'fastmcp'" in imported
    assert "'key_value'" not in imported
