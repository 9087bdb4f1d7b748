"""memory-tools on a Redis that goes back in time (issue 35, point 3).

A restart from an older RDB, or a failover to a lagging replica, brings back an older state of
the namespace, and the changes written next reuse the change counter of the ones lost. The
search index and the key list must follow Redis exactly all the same: in the launcher that saw
the newer state, and in a new launcher whose saved index (per-user cache) holds the newer state.
Real redis-server processes (SIGKILL, restart from the RDB) and real launchers over stdio.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from doc_processing_std_tools.embedded_redis import free_port
from doc_processing_std_tools.memory.redis_connection import RedisMemory
from doc_processing_std_tools.memory.redis_store import RedisMemoryStore
from helpers.launch import launched, text_of
from helpers.redis_server import REDIS_SERVER, SKIP_REASON, start_redis

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

NAMESPACE = "rollback"
LOST_KEYS = 2  # keys written after the snapshot, besides the plan's new value


class Restorable:
    """A redis-server that keeps its RDB in *folder*: SAVE, then SIGKILL and start again from it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir()
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.proc, _ = start_redis(self.folder, port=self.port)
        self.admin = redis.Redis(port=self.port)

    def kill_and_restore(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.admin.close()
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self.admin.close()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def keys(self) -> list[str]:
        """The namespace's keys, read from Redis itself: its top-level ``<key>.json`` entries."""
        names = self.admin.hkeys(f"dpt-memory:{{{NAMESPACE}}}:files")
        entries = [n.decode() for n in names if b"/" not in n and n.endswith(b".json")]
        data = [self.admin.hget(f"dpt-memory:{{{NAMESPACE}}}:files", n) for n in entries]
        return sorted(json.loads(d)["key"] for d in data if d is not None)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Restorable]:
    restorable = Restorable(tmp_path / "redis")
    try:
        yield restorable
    finally:
        restorable.stop()


async def call(session: Any, tool: str, **args: object) -> str:
    result = await session.call_tool(tool, args)
    text = text_of(result)
    assert not result.is_error, f"{tool}: {text}"
    return text


async def follows_redis(session: Any, server: Restorable, now: str, gone: str) -> None:
    """read, search and list answer what Redis holds, not what it held before the rollback."""
    assert await call(session, "read_memory", key="plan") == f"the plan: {now}"
    assert json.loads(await call(session, "search_memory", query=gone)) == []
    found = json.loads(await call(session, "search_memory", query=now))
    assert found == [{"key": "plan", "value": f"the plan: {now}"}]
    listed = json.loads(await call(session, "list_memory_keys"))
    assert listed == server.keys()
    everything = json.loads(await call(session, "search_memory", query=""))
    assert [item["key"] for item in everything] == server.keys()


async def test_search_and_list_follow_a_restore_from_an_older_rdb(
    server: Restorable, tmp_path: Path
) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(
        "servers:\n  memory:\n    server: memory-tools\n"
        f"    settings: {{url: '{server.url}', namespace: {NAMESPACE}}}\n"
    )
    cache = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(cache)}
    async with launched(config, env=env) as session:
        await call(session, "write_memory", key="plan", value="the plan: first draft")
        await call(session, "write_memory", key="kept", value="written before the snapshot")
        server.admin.save()
        await call(session, "write_memory", key="plan", value="the plan: ALPHA")
        for i in range(LOST_KEYS):
            await call(session, "write_memory", key=f"lost-{i}", value="after the snapshot")
        # the index has seen the newer state
        assert json.loads(await call(session, "search_memory", query="ALPHA"))[0]["key"] == "plan"
        assert len(json.loads(await call(session, "list_memory_keys"))) == 2 + LOST_KEYS

        server.kill_and_restore()
        assert server.keys() == ["kept", "plan"]  # the RDB's state: the last changes are lost
        # as many changes as were lost: the change counter is back where it was
        await call(session, "write_memory", key="plan", value="the plan: BRAVO")
        for i in range(LOST_KEYS):
            await call(session, "write_memory", key=f"new-{i}", value="after the restore")
        await follows_redis(session, server, now="BRAVO", gone="ALPHA")

        # the same again, this time with the launcher gone while Redis goes back in time
        server.admin.save()
        await call(session, "write_memory", key="plan", value="the plan: CHARLIE")
        for i in range(LOST_KEYS):
            await call(session, "write_memory", key=f"lost-again-{i}", value="after the snapshot")
        assert json.loads(await call(session, "search_memory", query="CHARLIE"))[0]["key"] == (
            "plan"
        )
    saved = list((cache / "doc-processing-std-tools" / "memory-index").glob("redis-*.idx"))
    assert saved, "the launcher saved no index at exit: the restart below would test nothing"

    server.kill_and_restore()
    writer = RedisMemoryStore(RedisMemory(server.url, NAMESPACE))  # another launcher's writes
    writer.write("plan", "the plan: DELTA")
    for i in range(LOST_KEYS):
        writer.write(f"new-again-{i}", "after the restore")
    async with launched(config, env=env) as session:
        await follows_redis(session, server, now="DELTA", gone="CHARLIE")
