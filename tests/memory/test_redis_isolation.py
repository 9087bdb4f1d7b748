"""memory-tools on Redis: one call's failure stays its own (issue 35, point 5).

Two writes of one store are in flight on a real redis-server held by ``CLIENT PAUSE WRITE`` (as a
failover holds it); the first one fails (its connection killed, or its reply timing out) and the
second one, answered once the pause ends, must succeed: the failure closes only the failed call's
connection, never the pool's others ("Bad file descriptor"). Three rounds each.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from doc_processing_std_tools.memory import MemoryStoreError, redis_connection
from doc_processing_std_tools.memory.redis_connection import RedisMemory
from doc_processing_std_tools.memory.redis_store import RedisMemoryStore
from helpers.redis_server import REDIS_SERVER, SKIP_REASON, start_redis

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

DEADLINE = 30.0  # seconds any awaited state may take to show


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[str, redis.Redis]]:
    """A redis-server of this test's own (it is paused): (url, an admin client)."""
    proc, port = start_redis(tmp_path)
    admin = redis.Redis(port=port, socket_timeout=DEADLINE)
    try:
        yield f"redis://127.0.0.1:{port}/0", admin
    finally:
        admin.execute_command("CLIENT UNPAUSE")
        admin.close()
        proc.kill()
        proc.wait()


class Call(threading.Thread):
    """A store call in a thread of its own: its answer, or its error's text."""

    def __init__(self, store: RedisMemoryStore, key: str) -> None:
        super().__init__(daemon=True)
        self.store, self.key = store, key
        self.answer: str | None = None
        self.error: str | None = None
        self.start()

    def run(self) -> None:
        try:
            self.answer = self.store.write(self.key, f"value of {self.key}")
        except MemoryStoreError as exc:
            self.error = str(exc)

    def finished(self) -> None:
        self.join(DEADLINE)
        assert not self.is_alive(), f"the call writing {self.key} never returned"


def warm(store: RedisMemoryStore) -> None:
    """Load the scripts, then close the connection that did: an idle connection whose last
    command was a script call would look like a call held by the pause."""
    store.write("warm", "the scripts loaded")
    store.db.client().connection_pool.disconnect()


def paused_writes(admin: redis.Redis, count: int) -> list[dict[str, str]]:
    """Wait until *count* clients wait in Redis with a script call (held by the pause)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        waiting = [c for c in admin.client_list() if c["cmd"] == "evalsha"]
        if len(waiting) >= count:
            return waiting
        assert time.monotonic() < deadline, admin.client_list()
        time.sleep(0.01)


@pytest.mark.parametrize("round_", range(3))
def test_a_killed_connection_fails_only_its_own_call(
    own_redis: tuple[str, redis.Redis], round_: int
) -> None:
    url, admin = own_redis
    store = RedisMemoryStore(RedisMemory(url, f"kill-{round_}"))
    warm(store)
    admin.client_pause(int(DEADLINE * 1000), all=False)  # WRITE: scripts that write wait
    first = Call(store, "first")
    [held] = paused_writes(admin, 1)
    second = Call(store, "second")
    paused_writes(admin, 2)
    admin.client_kill_filter(_id=held["id"])
    first.finished()
    assert first.error is not None and "Cannot reach Redis" in first.error, first.answer
    admin.execute_command("CLIENT UNPAUSE")
    second.finished()
    assert second.answer == "Memory 'second' saved.", second.error
    assert store.read("second") == "value of second"


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_a_timed_out_reply_fails_only_its_own_call(
    own_redis: tuple[str, redis.Redis], round_: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call's reply times out (2 s) while the second, sent a second later, still has
    time: the pause ends as soon as the first call has failed."""
    url, admin = own_redis
    monkeypatch.setattr(redis_connection, "SOCKET_TIMEOUT", 2.0)
    store = RedisMemoryStore(RedisMemory(url, f"timeout-{round_}"))
    warm(store)
    admin.client_pause(int(DEADLINE * 1000), all=False)
    first = Call(store, "first")
    deadline = time.monotonic() + DEADLINE
    while int(paused_writes(admin, 1)[0]["idle"]) < 1:  # the first has waited a second
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second = Call(store, "second")
    paused_writes(admin, 2)
    first.finished()
    assert first.error is not None and "Timeout" in first.error, first.answer
    admin.execute_command("CLIENT UNPAUSE")
    second.finished()
    assert second.answer == "Memory 'second' saved.", second.error
    assert store.read("second") == "value of second"
