"""popoto-memory through a spawned ``dpt-launch`` (the official mcp stdio client) and run alone
with ``python -m``: the same replies, stores that outlive launchers, restarts after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("popoto")

import redis
from popoto.integrations.mcp_server import (
    SERVER_INSTRUCTIONS,
    tool_definitions,
)

from doc_processing_std_tools.embedded_redis import pid_alive as _pid_alive
from helpers.popoto import listening
from helpers.popoto import wait_gone as _wait_gone
from helpers.redis_server import needs_redis_server

LAUNCHER = Path(sys.executable).parent / "dpt-launch"


def _launcher_params(folder: Path, data_dir: Path | None = None, agent_id: str = "launched"):
    """A config with only popoto-memory (embedded) in *folder*; its store in *data_dir*."""
    from mcp import StdioServerParameters

    folder.mkdir(parents=True, exist_ok=True)
    store = data_dir or folder / "store"
    (folder / "tools.yaml").write_text(
        "servers:\n"
        "  memory:\n"
        "    server: popoto-memory\n"
        "    settings:\n"
        "      backend: embedded\n"
        f"      data_dir: {json.dumps(str(store))}\n"
        f"      agent_id: {agent_id}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPOTO_")}
    env.pop("REDIS_URL", None)
    return StdioServerParameters(
        command=str(LAUNCHER),
        args=["--config", str(folder / "tools.yaml")],
        env=env,
        cwd=str(folder),
    )


def _pidfile(store: Path) -> dict:
    return json.loads((store / "redis.pid").read_text())


def _pids_running(argument: str) -> list[int]:
    """Live processes with *argument* on their command line (Linux: /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if os.fsencode(argument) in argv and _pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


needs_proc = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")


@needs_redis_server
@needs_proc
@pytest.mark.parametrize(
    "ending", ["eof", "sigterm", pytest.param("sigkill", marks=pytest.mark.slow)]
)
async def test_through_the_launcher(tmp_path, ending):
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    with anyio.fail_after(30):
        async with (
            stdio_client(_launcher_params(tmp_path)) as (read, write),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            assert SERVER_INSTRUCTIONS in (init.instructions or "")
            names = [t.name for t in (await session.list_tools()).tools]
            assert names == ["memory_search", "memory_save", "memory_feedback", "memory_status"]
            saved = await session.call_tool("memory_save", {"content": "Launched via dpt."})
            assert not saved.is_error, saved.content[0].text
            found = await session.call_tool("memory_search", {"query": "launched dpt"})
            assert "Launched via dpt." in found.content[0].text
            pids = _pidfile(tmp_path / "store")
            assert _pid_alive(pids["pid"])
            if ending != "eof":  # else: leaving the client closes the launcher's stdin
                (launcher,) = _pids_running(str(tmp_path / "tools.yaml"))
                os.kill(launcher, signal.SIGTERM if ending == "sigterm" else signal.SIGKILL)
                assert await anyio.to_thread.run_sync(_wait_gone, launcher)
    assert await anyio.to_thread.run_sync(_wait_gone, pids["pid"]), (
        f"redis-server outlived the launcher ({ending})"
    )
    assert await anyio.to_thread.run_sync(_wait_gone, pids["supervisor"])
    assert not (tmp_path / "store" / "redis.pid").exists()


@pytest.mark.slow
@needs_redis_server
def test_the_launchers_replies_are_the_servers_own_byte_for_byte(tmp_path, redis_url):
    """dpt-launch serves popoto's plain calls on its stdio fast path (launcher/external/fast_path.py):
    the lines it writes are the ones ``python -m doc_processing_std_tools.popoto_memory`` writes."""
    from helpers.rpc import initialize, message, send

    (tmp_path / "tools.yaml").write_text(
        "servers:\n  memory:\n    server: popoto-memory\n"
        f"    settings: {{backend: redis, url: '{redis_url}', agent_id: same}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPOTO_")}
    env.update(POPOTO_MEMORY_URL=redis_url, POPOTO_MEMORY_AGENT_ID="same")
    commands = {
        "launcher": [str(LAUNCHER), "--config", str(tmp_path / "tools.yaml")],
        "alone": [sys.executable, "-m", "doc_processing_std_tools.popoto_memory"],
    }
    calls = [
        ("memory_search", {"query": "nothing saved yet"}),
        ("memory_save", {"content": "Both write the same line."}),
        ("memory_save", {"content": ""}),
        ("memory_save", {"content": "x" * 30_000}),
        ("memory_feedback", {"key": "k", "outcome": "maybe"}),
        ("memory_search", {"query": 7}),
    ]
    lines: dict[str, list[bytes]] = {}
    for kind, command in commands.items():
        redis.Redis.from_url(redis_url).flushdb()  # both start from the same (empty) store
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=tmp_path,
        )
        try:
            initialize(proc)
            send(proc, message("notifications/initialized"))
            lines[kind] = []
            for i, (name, args) in enumerate(calls, start=2):
                send(proc, message("tools/call", {"name": name, "arguments": args}, id=i))
                lines[kind].append(proc.stdout.readline())
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)
    assert lines["launcher"] == lines["alone"]
    assert [json.loads(line)["result"]["isError"] for line in lines["launcher"]] == [
        False,
        False,
        True,
        True,
        True,
        True,
    ]


@needs_redis_server  # (its default backend is the embedded redis-server)
async def test_runs_alone_with_python_dash_m(tmp_path: Path) -> None:
    """``python -m doc_processing_std_tools.popoto_memory`` serves the four tools over stdio."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "doc_processing_std_tools.popoto_memory"],
        env={
            **os.environ,
            "POPOTO_MEMORY_AGENT_ID": "alone",
            "XDG_DATA_HOME": str(tmp_path / "xdg"),
        },
        cwd=str(tmp_path),
    )
    with open(os.devnull, "w") as errlog, anyio.fail_after(60):
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names = [tool.name for tool in (await session.list_tools()).tools]
            status = await session.call_tool("memory_status", {})
    assert names == ["memory_search", "memory_save", "memory_feedback", "memory_status"]
    assert "agent: alone" in status.content[0].text
    # the embedded store's default data folder is per user (XDG_DATA_HOME), not the cwd
    assert (tmp_path / "xdg" / "doc-processing-std-tools" / "popoto-redis").is_dir()
    assert not (tmp_path / ".dpt").exists()


@pytest.mark.slow  # (a lifecycle test: a launcher restarted)
@needs_redis_server
async def test_launcher_contract_and_memories_survive_a_restart(tmp_path):
    """Through dpt-launch with the default (embedded) backend and no Redis started by the test:
    tools/list equals popoto's definitions; a saved memory is found after a restart."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async def session_run(action):
        with anyio.fail_after(30):
            async with (
                stdio_client(_launcher_params(tmp_path)) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return await action(session)

    async def list_and_save(session):
        listed = (await session.list_tools()).tools
        saved = await session.call_tool("memory_save", {"content": "Restarts keep the sky blue."})
        assert not saved.is_error, saved.content[0].text
        return listed, _pidfile(tmp_path / "store")["pid"]

    listed, first_pid = await session_run(list_and_save)
    assert [
        {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
        for t in listed
    ] == tool_definitions()
    assert await anyio.to_thread.run_sync(_wait_gone, first_pid)  # the first redis-server stopped

    async def search(session):
        return await session.call_tool("memory_search", {"query": "sky blue restarts"})

    found = await session_run(search)
    assert not found.is_error
    assert "Restarts keep the sky blue." in found.content[0].text


@pytest.mark.slow  # a storm: three launchers on one store
@needs_redis_server
@needs_proc
async def test_three_launchers_share_one_store(tmp_path):
    """Issue 8: three dpt-launch processes on one data_dir; save in each, search from each
    finds all three; SIGKILL two, close the third: no redis-server left within 10 s;
    start again: the memories are there."""
    from contextlib import AsyncExitStack

    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    store = tmp_path / "shared-store"
    facts = [f"Launcher number {n} saw the zebra {word}." for n, word in enumerate("abc")]
    folders = [tmp_path / f"client{n}" for n in range(3)]
    with anyio.fail_after(90):
        async with AsyncExitStack() as stack:
            sessions = []
            for folder in folders:
                read, write = await stack.enter_async_context(
                    stdio_client(_launcher_params(folder, store, agent_id="shared"))
                )
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                sessions.append(session)
            for session, fact in zip(sessions, facts, strict=True):
                saved = await session.call_tool("memory_save", {"content": fact})
                assert not saved.is_error, saved.content[0].text
            for session in sessions:
                found = await session.call_tool("memory_search", {"query": "zebra", "limit": 10})
                assert not found.is_error, found.content[0].text
                for fact in facts:
                    assert fact in found.content[0].text
            state = _pidfile(store)
            assert len(_pids_running(str(store / "redis.conf"))) == 1  # one server for all

            launchers = [_pids_running(str(folder / "tools.yaml")) for folder in folders]
            assert all(len(pids) == 1 for pids in launchers), launchers
            for (pid,) in launchers[:2]:
                os.kill(pid, signal.SIGKILL)
            for (pid,) in launchers[:2]:
                assert await anyio.to_thread.run_sync(_wait_gone, pid)
            # the survivor still works on the same server
            found = await sessions[2].call_tool("memory_search", {"query": "zebra", "limit": 10})
            assert not found.is_error and facts[0] in found.content[0].text
            assert _pidfile(store)["pid"] == state["pid"]
        # leaving the stack closed the third launcher's stdin (EOF)

    def server_gone() -> bool:
        return _wait_gone(state["pid"]) and _wait_gone(state["supervisor"])

    assert await anyio.to_thread.run_sync(server_gone), "redis-server left running"
    assert not listening(state["port"])
    assert _pids_running(str(store / "redis.conf")) == []

    with anyio.fail_after(30):
        async with (
            stdio_client(_launcher_params(folders[0], store, agent_id="shared")) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            found = await session.call_tool("memory_search", {"query": "zebra", "limit": 10})
    assert not found.is_error
    for fact in facts:
        assert fact in found.content[0].text


@pytest.mark.slow  # (kills a launcher and waits for the lease it held to be noticed)
@needs_redis_server
@needs_proc
async def test_first_call_after_a_restart_that_followed_a_sigkill(tmp_path):
    """Issue 12 item 5: kill the only launcher mid-use, restart at once: the first call works."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    store = tmp_path / "store"
    for round_ in range(3):
        with anyio.fail_after(30):
            async with (
                stdio_client(_launcher_params(tmp_path, store, agent_id="storm")) as (r, w),
                ClientSession(r, w) as session,
            ):
                await session.initialize()
                # the first call of this launcher, right after the previous one was killed
                saved = await session.call_tool(
                    "memory_save", {"content": f"Storm round {round_} kept the lighthouse on."}
                )
                assert not saved.is_error, saved.content[0].text
                found = await session.call_tool(
                    "memory_search", {"query": "lighthouse", "limit": 10}
                )
                assert not found.is_error, found.content[0].text
                for earlier in range(round_ + 1):
                    assert f"Storm round {earlier} kept the lighthouse on." in found.content[0].text
                (launcher,) = _pids_running(str(tmp_path / "tools.yaml"))
                os.kill(launcher, signal.SIGKILL)
                assert await anyio.to_thread.run_sync(_wait_gone, launcher)
