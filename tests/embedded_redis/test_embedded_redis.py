"""The embedded backend: one redis-server per data folder, shared by every user of it, started
by the first and stopped with the last (even a SIGKILLed one), its data kept across restarts."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("popoto")

import redis
from fastmcp import Client

from doc_processing_std_tools import popoto_memory as pm
from doc_processing_std_tools.embedded_redis import (
    EmbeddedRedis,
    EmbeddedRedisError,
    free_port,
)
from doc_processing_std_tools.embedded_redis import pid_alive as _pid_alive
from helpers.paths import REPO
from helpers.popoto import call, listening
from helpers.popoto import wait_gone as _wait_gone
from helpers.processes import wakeups
from helpers.redis_server import (
    REDIS_SERVER,
    needs_redis_server,
)
from helpers.waiting import wait_for


@needs_redis_server
async def test_embedded_persists_across_restarts_and_stops(tmp_path):
    data_dir = tmp_path / "store"
    settings = pm.Settings(backend="embedded", data_dir=str(data_dir), agent_id="emb")
    server = pm.create_server(settings)
    async with Client(server) as c:
        assert pm.runtime_of(server).wait_ready()  # the lifespan starts it in the background
        emb = pm.runtime_of(server).embedded
        pid = emb.pid
        assert emb.is_ours(pid)
        err, _ = await call(c, "memory_save", {"content": "Embedded memories survive restarts."})
        assert not err
        err, text = await call(c, "memory_status")
        assert not err, text
        assert f"store: embedded redis-server at redis://:***@127.0.0.1:{emb.port}/1" in text
    assert not _pid_alive(pid), "redis-server left running after the lifespan exited"
    assert not (data_dir / "redis.pid").exists()
    password = (data_dir / "password").read_text()
    assert stat.S_IMODE((data_dir / "password").stat().st_mode) == 0o600
    assert password.strip() not in (data_dir / "redis.log").read_text()

    server = pm.create_server(settings)
    async with Client(server) as c:
        assert pm.runtime_of(server).wait_ready()
        pid2 = pm.runtime_of(server).embedded.pid
        err, text = await call(c, "memory_search", {"query": "embedded memories restarts"})
        assert not err
        assert "Embedded memories survive restarts." in text
    assert not _pid_alive(pid2)
    assert (data_dir / "password").read_text() == password  # reused, not regenerated


_USER_SCRIPT = """
import sys
from doc_processing_std_tools.embedded_redis import EmbeddedRedis
e = EmbeddedRedis(sys.argv[1])
e.ensure_running()
print(e.pid, e.supervisor_pid, e.port, flush=True)
sys.stdin.read()  # until killed, or stdin closes
e.release()
"""


def _start_user(data_dir: Path) -> tuple[subprocess.Popen, int, int, int]:
    """A process holding a lease on *data_dir*'s server -> (process, redis pid, supervisor, port)."""
    user = subprocess.Popen(
        [sys.executable, "-c", _USER_SCRIPT, str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    line = user.stdout.readline().split()
    assert len(line) == 3 and all(p.isdigit() for p in line), f"user printed {line!r}"
    pid, supervisor, port = map(int, line)
    return user, pid, supervisor, port


@pytest.mark.slow
@needs_redis_server
def test_embedded_server_stops_when_its_last_user_is_killed(tmp_path):
    """No launcher left, even a SIGKILLed one: the supervisor stops the redis-server."""
    first, pid, supervisor, port = _start_user(tmp_path / "store")
    second, pid2, _, _ = _start_user(tmp_path / "store")
    try:
        assert pid2 == pid  # attached, not a second server
        first.kill()  # the starter dies; the server must stay up for the other user
        first.wait(timeout=10)
        rounds = wakeups(supervisor) + 5  # (it wakes once per look at the lease)
        wait_for(lambda: wakeups(supervisor) >= rounds, "five more rounds of the supervisor")
        assert _pid_alive(pid) and listening(port), "server stopped under a live user"
        second.kill()
        second.wait(timeout=10)
        assert _wait_gone(pid), "redis-server outlived its SIGKILLed last user"
        assert _wait_gone(supervisor), "the supervisor stayed after stopping the server"
        assert not listening(port)
        assert not (tmp_path / "store" / "redis.pid").exists()
    finally:
        for p in (pid, supervisor):
            if _pid_alive(p):
                os.kill(p, signal.SIGKILL)


@needs_redis_server
def test_embedded_users_share_one_server_and_the_last_stops_it(tmp_path):
    a, b = EmbeddedRedis(tmp_path / "store"), EmbeddedRedis(tmp_path / "store")
    a.ensure_running()
    try:
        b.ensure_running()
        assert (a.started_here, b.started_here) == (True, False)
        assert (b.port, b.pid) == (a.port, a.pid)
        redis.Redis.from_url(a.url()).set("shared", "yes")
        assert redis.Redis.from_url(b.url()).get("shared") == b"yes"
        pid = a.pid
        a.release()  # not the last: the server stays
        assert _pid_alive(pid)
        assert redis.Redis.from_url(b.url()).get("shared") == b"yes"
        b.release()  # the last: stopped before release() returns
        assert not _pid_alive(pid)
    finally:
        a.release()
        b.release()


@needs_redis_server
def test_embedded_different_fixed_port_is_refused_with_the_cause(tmp_path):
    port = free_port()
    a = EmbeddedRedis(tmp_path / "store", port=port)
    a.ensure_running()
    try:
        other = free_port()
        with pytest.raises(EmbeddedRedisError) as caught:
            EmbeddedRedis(tmp_path / "store", port=other).ensure_running()
        message = str(caught.value)
        assert f"already served on port {port}" in message
        assert f"configured port {other}" in message
        assert "redis.log" not in message and "crash" not in message
        same = EmbeddedRedis(tmp_path / "store", port=port)
        same.ensure_running()  # the same port attaches
        same.release()
    finally:
        a.release()


@needs_redis_server
async def test_embedded_server_left_behind_is_stopped_and_data_kept(tmp_path):
    """A redis-server of ours whose supervisor is gone (e.g. killed on macOS, where no
    parent-death signal exists) is stopped at the next start; its AOF is kept."""
    data_dir = tmp_path / "store"
    stale = EmbeddedRedis(data_dir)
    stale._make_data_dir()
    stale.port = free_port()
    stale._write_config(stale.port)
    proc = subprocess.Popen(
        [REDIS_SERVER, str(stale.config_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        stale._wait_ready(stale.port, 10, watch=None)
        redis.Redis.from_url(stale.url()).set("left-behind", "yes")
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        stale.write_state({"pid": proc.pid, "port": stale.port, "supervisor": dead.pid})

        server = pm.create_server(pm.Settings(data_dir=str(data_dir), agent_id="stale"))
        async with Client(server) as c:
            assert pm.runtime_of(server).wait_ready()
            assert proc.poll() is not None, "the left-behind redis-server was not stopped"
            emb = pm.runtime_of(server).embedded
            assert emb.pid != proc.pid and emb.started_here
            assert redis.Redis.from_url(emb.url()).get("left-behind") == b"yes"  # AOF kept
            err, text = await call(c, "memory_status")
            assert not err, text
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@needs_redis_server
async def test_embedded_server_killed_under_a_live_launcher_is_started_again(tmp_path):
    """Someone kills the supervisor (and so the server): the next call brings it back."""
    server = pm.create_server(pm.Settings(data_dir=str(tmp_path / "store"), agent_id="again"))
    async with Client(server) as c:
        err, text = await call(c, "memory_save", {"content": "Survives a killed server."})
        assert not err, text
        emb = pm.runtime_of(server).embedded
        old_pid = emb.pid
        os.kill(emb.supervisor_pid, signal.SIGKILL)
        if not sys.platform.startswith("linux"):  # no parent-death signal there
            os.kill(old_pid, signal.SIGTERM)
        assert await anyio.to_thread.run_sync(_wait_gone, old_pid)
        err, text = await call(c, "memory_search", {"query": "survives killed server"})
        assert not err, text
        assert "Survives a killed server." in text
        new_pid = emb.pid
        assert new_pid != old_pid and _pid_alive(new_pid)
    assert await anyio.to_thread.run_sync(_wait_gone, new_pid)


async def test_embedded_without_redis_server_reports_it(tmp_path, monkeypatch):
    monkeypatch.setattr("doc_processing_std_tools.embedded_redis.find_executable", lambda: None)
    server = pm.create_server(pm.Settings(data_dir=str(tmp_path / "store")))
    async with Client(server) as c:
        err, text = await call(c, "memory_search", {"query": "x"})
        assert err
        assert "the embedded backend needs a redis-server" in text
        err, text = await call(c, "memory_status")
        assert err and "needs a redis-server" in text
