"""The fleet lock (``lock:`` in the config) on a real redis-server: the lock itself (two
instances stand for two launchers), and one launcher whose locked calls take it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import redis

from doc_processing_std_tools.embedded_redis import free_port
from doc_processing_std_tools.locking import LockWaitTimeout
from doc_processing_std_tools.locking.fleet_lock import FleetLock, FleetLockUnavailable
from helpers.launch import launched, text_of
from helpers.paths import SERVERS
from helpers.redis_server import REDIS_SERVER, SKIP_REASON, running_redis

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)
LOG = "fleet-writer:log"


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with running_redis(tmp_path_factory.mktemp("redis")) as port:
        yield port


@pytest.fixture
def lock_name(request: pytest.FixtureRequest) -> str:
    """A lock of this test's own (the redis-server is the module's)."""
    return request.node.name.replace("_", "-").replace("[", "-").replace("]", "")[:90]


def _url(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


def _queued(port: int, name: str) -> int:
    return int(redis.Redis(port=port).zcard(f"{{dpt-lock:{name}}}:queue"))


def _wait_until(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_waiters_get_the_lock_one_at_a_time_in_arrival_order(
    redis_port: int, lock_name: str
) -> None:
    locks = [FleetLock(_url(redis_port), lock_name, lease=5) for _ in range(4)]
    order: list[int] = []
    inside = threading.Semaphore(1)

    def take(i: int) -> None:
        locks[i].acquire(time.monotonic() + 10)
        assert inside.acquire(blocking=False), "two holders at once"
        order.append(i)
        inside.release()
        locks[i].release_now()

    try:
        locks[0].acquire(None)
        threads = []
        for i in (1, 2, 3):  # queued one after the other
            threads.append(threading.Thread(target=take, args=(i,)))
            threads[-1].start()
            _wait_until(lambda i=i: _queued(redis_port, lock_name) == i, f"waiter {i} queued")
        locks[0].release_now()
        for thread in threads:
            thread.join(10)
        assert order == [1, 2, 3]
    finally:
        for lock in locks:
            lock.close()


HOLDER = """
import sys
from doc_processing_std_tools.locking.fleet_lock import FleetLock

lock = FleetLock(sys.argv[1], sys.argv[2], lease=float(sys.argv[3]))
lock.acquire(None)
print("held", flush=True)
sys.stdin.read()  # until killed
"""


@pytest.mark.slow
def test_a_dead_holders_lease_runs_out_and_a_live_holders_is_renewed(
    redis_port: int, lock_name: str
) -> None:
    """Another process holds the lock with a lease of 1.5 s: alive, it renews the lease (every
    0.5 s) for as long as it holds it, so a wait of two leases ends in a timeout; SIGKILLed (no
    renewal, no release), its lease runs out and the waiter gets the lock."""
    lease = 1.5
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, _url(redis_port), lock_name, str(lease)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    other = FleetLock(_url(redis_port), lock_name, lease=lease)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(LockWaitTimeout):
            other.acquire(time.monotonic() + 2 * lease)
        assert _queued(redis_port, lock_name) == 0  # the waiter that gave up left the queue
        holder.kill()
        holder.wait(timeout=10)
        other.acquire(time.monotonic() + lease + 10)
        other.release_now()
    finally:
        other.close()
        if holder.poll() is None:
            holder.kill()
        holder.communicate()


async def test_a_cancelled_async_wait_leaves_the_lock_free(redis_port: int, lock_name: str) -> None:
    holder = FleetLock(_url(redis_port), lock_name, lease=5)
    waiter = FleetLock(_url(redis_port), lock_name, lease=5)
    try:
        holder.acquire(None)
        with anyio.move_on_after(0.05):
            await waiter.acquire_async(None)
            pytest.fail("the lock was held")
        holder.release_now()
        with anyio.fail_after(5):
            await waiter.acquire_async(None)  # not queued behind its own cancelled wait
        waiter.release()
        with anyio.fail_after(5):
            await holder.acquire_async(None)
        holder.release()
    finally:
        holder.close()
        waiter.close()


def test_an_unreachable_redis_is_one_line_without_the_password() -> None:
    lock = FleetLock(f"redis://:s3cret@127.0.0.1:{free_port()}/0", "x", lease=1)
    try:
        with pytest.raises(FleetLockUnavailable) as caught:
            lock.acquire(time.monotonic() + 5)
    finally:
        lock.close()
    text = str(caught.value)
    assert "\n" not in text and "s3cret" not in text
    assert "lock.url" in text and "redis://***@127.0.0.1" in text


def _config(folder: Path, redis_url: str, writer_port: int, name: str) -> Path:
    config = folder / "tools.yaml"
    config.write_text(
        f"lock: {{url: {json.dumps(redis_url)}, name: {name}, lease: 5}}\n"
        "servers:\n"
        "  writer:\n"
        f"    command: {json.dumps(sys.executable)}\n"
        f"    args: [{json.dumps(str(SERVERS / 'fleet_writer.py'))}, '{writer_port}']\n"
        "    lock: always\n"
        "    timeout: 20\n"
        "  memory:\n"
        "    server: memory-tools\n"
        f"    settings: {{memory_dir: {json.dumps(str(folder / 'memory'))}}}\n",
        encoding="utf-8",
    )
    return config


@pytest.mark.slow
async def test_a_launchers_locked_call_waits_for_the_fleet_lock(
    tmp_path: Path, redis_port: int, lock_name: str
) -> None:
    """Another launcher (the test's FleetLock) holds the lock: the writer does not start until
    it is given back; memory-tools (which locks in its own thread) waits the same way."""
    store = redis.Redis(port=redis_port)
    store.delete(LOG)
    other = FleetLock(_url(redis_port), lock_name, lease=5)
    config = _config(tmp_path, _url(redis_port), redis_port, lock_name)
    try:
        async with launched(config) as session:
            warm = await session.call_tool("write", {"label": "warm-up"})  # lock free: runs
            assert not warm.is_error, text_of(warm)
            other.acquire(None)
            results: dict[str, str] = {}

            async def call(tool: str, arguments: dict) -> None:
                results[tool] = text_of(await session.call_tool(tool, arguments))

            async with anyio.create_task_group() as group:
                group.start_soon(call, "write", {"label": "locked"})
                await anyio.to_thread.run_sync(
                    lambda: _wait_until(lambda: _queued(redis_port, lock_name) == 1, "queued")
                )
                assert store.lrange(LOG, 0, -1)[-1].startswith(b"exit warm-up")
                other.release_now()
            assert results["write"] == "wrote locked"
            other.acquire(None)
            async with anyio.create_task_group() as group:
                group.start_soon(
                    call, "memory_create", {"path": "/memories/a.txt", "file_text": "x"}
                )
                await anyio.to_thread.run_sync(
                    lambda: _wait_until(lambda: _queued(redis_port, lock_name) == 1, "queued")
                )
                assert not (tmp_path / "memory" / "a.txt").exists()
                other.release_now()
            assert "a.txt" in results["memory_create"] and (tmp_path / "memory" / "a.txt").exists()
    finally:
        other.close()


async def test_an_unreachable_lock_redis_refuses_locked_calls_in_one_line(tmp_path: Path) -> None:
    """In process (no child): memory-tools locks in its own worker thread."""
    from fastmcp import Client

    from doc_processing_std_tools import locking
    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config

    config = tmp_path / "tools.yaml"
    config.write_text(
        f"lock: {{url: 'redis://:hunter2@127.0.0.1:{free_port()}/0', name: gone}}\n"
        "servers:\n"
        "  memory:\n"
        "    server: memory-tools\n"
        f"    settings: {{memory_dir: {json.dumps(str(tmp_path / 'memory'))}}}\n",
        encoding="utf-8",
    )
    composition = await compose(load_config(config))
    try:
        async with Client(composition.root) as client:
            result = await client.call_tool(
                "memory_create", {"path": "/memories/b.txt", "file_text": "x"}, raise_on_error=False
            )
    finally:
        await composition.aclose()
    text = text_of(result)
    assert result.is_error, text
    assert "\n" not in text and "hunter2" not in text and "lock.url" in text, text
    assert not (tmp_path / "memory" / "b.txt").exists()
    assert locking.fleet_lock_in_use() is None  # closing the composition put the lock away


def test_check_fails_when_the_lock_redis_cannot_be_used(tmp_path: Path, capsys) -> None:
    from doc_processing_std_tools.launcher.cli.main import main

    config = tmp_path / "tools.yaml"
    config.write_text(
        f"lock: {{url: 'redis://:hunter2@127.0.0.1:{free_port()}/0'}}\n"
        "servers:\n"
        "  memory:\n"
        "    server: memory-tools\n"
        f"    settings: {{memory_dir: {json.dumps(str(tmp_path / 'memory'))}}}\n",
        encoding="utf-8",
    )
    from doc_processing_std_tools import locking

    assert main(["--config", str(config), "--check"]) == 1
    assert locking.fleet_lock_in_use() is None  # put away with the composition
    out = " ".join(capsys.readouterr().out.split())
    assert "FAIL the fleet lock's Redis at redis://***@127.0.0.1" in out  # (not under servers.)
    assert "hunter2" not in out


async def test_the_wait_for_the_fleet_lock_ends_at_the_calls_timeout(
    tmp_path: Path, redis_port: int, lock_name: str
) -> None:
    """In process: another launcher holds the lock past memory-tools' timeout of 0.5 s; the
    call answers that it did not start, nothing is written, and it left the queue."""
    from fastmcp import Client

    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config

    config = tmp_path / "tools.yaml"
    config.write_text(
        f"lock: {{url: {json.dumps(_url(redis_port))}, name: {lock_name}}}\n"
        "servers:\n"
        "  memory:\n"
        "    server: memory-tools\n"
        "    timeout: 0.5\n"
        f"    settings: {{memory_dir: {json.dumps(str(tmp_path / 'memory'))}}}\n",
        encoding="utf-8",
    )
    other = FleetLock(_url(redis_port), lock_name, lease=5)
    composition = await compose(load_config(config))
    try:
        other.acquire(None)
        async with Client(composition.root) as client:
            result = await client.call_tool(
                "memory_create", {"path": "/memories/c.txt", "file_text": "x"}, raise_on_error=False
            )
    finally:
        other.close()
        await composition.aclose()
    assert result.is_error and "did not start within its timeout" in text_of(result)
    assert not (tmp_path / "memory" / "c.txt").exists()
    assert _queued(redis_port, lock_name) == 0
