"""Children that misbehave cannot hurt the launcher (issue 26, section 4): real ``dpt-launch``
processes with real children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from helpers.launch import launched, launcher_command, text_of
from helpers.paths import SERVERS
from helpers.processes import alive, cmdline, pids_with

SERIAL = SERVERS / "serial_child.py"
EXTERNAL = SERVERS / "external_server.py"


@pytest.mark.slow  # waits out a 5 s call
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
async def hold(seconds: float, started: str) -> str:
    """Changes state (not read-only): the launcher holds the process lock while it runs; the
    file *started* says it is running (so under the lock)."""
    open(started, "w").close()
    await anyio.sleep(seconds)
    return "held"
'''


@pytest.mark.slow
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

        started = tmp_path / "holding"

        async def hold() -> None:
            outcome["hold"] = await session.call_tool(
                "slow_hold", {"seconds": 4, "started": str(started)}
            )

        async with anyio.create_task_group() as group:
            group.start_soon(hold)
            with anyio.fail_after(30):
                while not started.exists():  # the hold runs, under the lock
                    await anyio.sleep(0.02)
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


def _counts(pid: int) -> tuple[int, int]:
    """(open file descriptors, threads) of *pid*."""
    return len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.slow  # a soak: ten reloads
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts fds and threads in /proc")
async def test_reloads_that_change_an_external_entry_leak_no_pipe_or_thread(
    write_config, tmp_path: Path
) -> None:
    """Each reload restarts the changed child with a new stderr pipe and reader thread; the old
    ones are closed with the old child, so ten reloads leave the launcher's counts unchanged."""

    def config_with(value: int) -> Path:
        return write_config(
            f"servers:\n  ext:\n    command: {sys.executable}\n"
            f"    args: [{EXTERNAL}, {tmp_path / 'count'}]\n    env: {{ROUND: '{value}'}}\n"
        )

    errlog = tmp_path / "launcher.err"
    config = config_with(0)
    async with launched(config, errlog=errlog) as session:
        child = int(text_of(await session.call_tool("whoami", {})))
        launcher = _parent(_parent(child))  # (the child runs under the shim on Linux)
        if "launcher.cli" not in cmdline(launcher):
            launcher = _parent(child)
        assert "launcher.cli" in cmdline(launcher)

        async def reload(value: int) -> None:
            done = errlog.read_text().count("reloaded ")
            config_with(value)
            os.kill(launcher, signal.SIGHUP)
            with anyio.fail_after(60):
                while errlog.read_text().count("reloaded ") == done:
                    await anyio.sleep(0.05)
            assert text_of(await session.call_tool("whoami", {})).isdigit()

        async def settled(expected: tuple[int, int]) -> tuple[int, int]:
            """The counts once the old child's pipe and thread had time to end (polled)."""
            with anyio.move_on_after(10):
                while _counts(launcher) != expected:
                    await anyio.sleep(0.1)
            return _counts(launcher)

        await reload(1)  # (the first reload imports and starts what later ones reuse)
        before, steady = _counts(launcher), 0
        with anyio.fail_after(30):
            while steady < 10:  # (the replaced child's pipe and thread may still be ending)
                await anyio.sleep(0.1)
                now = _counts(launcher)
                before, steady = now, steady + 1 if now == before else 0
        for value in range(2, 12):
            await reload(value)
        assert await settled(before) == before
        assert errlog.read_text().count("reloaded ") == 11


DAEMONIZING = """
import os, signal, sys, time

pid_file, server, counter = sys.argv[1:4]
if os.fork() == 0:  # a helper that leaves the group and the session, then forks a daemon
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with open(pid_file + ".tmp", "w") as file:
            file.write(str(os.getpid()))
        os.rename(pid_file + ".tmp", pid_file)
        while True:
            time.sleep(1)
    os._exit(0)
os.wait()
os.execv(sys.executable, [sys.executable, server, counter])
"""


@pytest.mark.slow  # SIGKILL storms
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the shim is Linux-only")
@pytest.mark.parametrize("command_exits_first", [False, True])
def test_sigkill_of_the_launcher_ends_a_daemon_that_left_the_group(
    write_config, tmp_path: Path, command_exits_first: bool
) -> None:
    """A grandchild that called setsid() and forked a SIGTERM-ignoring daemon is still ended
    when the launcher is SIGKILLed: while the server runs, and just after it exited."""
    script = tmp_path / "daemonizing.py"
    script.write_text(DAEMONIZING)
    pid_file = tmp_path / "daemon.pid"
    config = write_config(
        f"servers:\n  ext:\n    command: {sys.executable}\n"
        f"    args: [{script}, {pid_file}, {EXTERNAL}, {tmp_path / 'count'}]\n"
    )
    proc = subprocess.Popen(
        [*launcher_command(), "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        server: list[int] = []
        while time.monotonic() < deadline and not (pid_file.exists() and server):
            server = [  # (the server itself: the shim's and the daemon's command lines name it too)
                pid
                for pid in pids_with(str(EXTERNAL))
                if cmdline(pid).split()[1:3] == [str(EXTERNAL), str(tmp_path / "count")]
            ]
            time.sleep(0.1)
        assert pid_file.exists() and server, "the server never started"
        daemon = int(pid_file.read_text())
        assert alive(daemon)
        if command_exits_first:
            os.kill(server[0], signal.SIGKILL)
            while alive(server[0]):
                time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and alive(daemon):
        time.sleep(0.1)
    if alive(daemon):
        os.kill(daemon, signal.SIGKILL)
        raise AssertionError("the daemon outlived the launcher")


async def test_a_stdout_line_over_max_line_bytes_is_dropped_and_its_call_fails(
    write_config, tmp_path: Path
) -> None:
    """A reply longer than the cap is never held whole: it is dropped, logged in one line, and
    the call it answered gets an error naming the setting; the child serves on."""
    errlog = tmp_path / "launcher.err"
    config = write_config(
        f"servers:\n  serial:\n    command: {sys.executable}\n    args: [{SERIAL}]\n"
        "    max_line_bytes: 100000\n"
    )
    async with launched(config, errlog=errlog) as session:
        pid = text_of(await session.call_tool("whoami", {}))
        flooded = await session.call_tool("flood", {"seconds": 3})
        assert flooded.is_error
        assert "over 100000 bytes (servers.serial.max_line_bytes)" in text_of(flooded)
        small = await session.call_tool("flood", {"seconds": 0.05})
        assert not small.is_error and len(text_of(small)) == 50000
        assert text_of(await session.call_tool("whoami", {})) == pid
    logged = [line for line in errlog.read_text().splitlines() if "dropped a stdout line" in line]
    assert len(logged) == 1 and len(logged[0]) < 2000, logged
