"""The change scripts' fencing check, against a real redis-server: a superseded grant of the
fleet lock (its number below the lock's ``…:fence`` key) changes nothing, in every script."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from doc_processing_std_tools.memory import redis_scripts as lua
from doc_processing_std_tools.memory.redis_connection import RedisMemory
from helpers.redis_server import REDIS_SERVER, SKIP_REASON, running_redis

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

FENCE_KEY = "{dpt-lock:fleet}:fence"
CHANGES = {
    "write": (lua.WRITE, "k.json", b"new", 10),
    "create": (lua.CREATE, "d/new.txt", b"new"),
    "replace_if": (lua.REPLACE_IF, "a.txt", "VERSION", b"new"),
    "put": (lua.PUT, "d/put.txt", b"new"),
    "mkdir": (lua.MKDIR, "empty"),
    "delete_file": (lua.DELETE_FILE, "k.json"),
    "delete_path": (lua.DELETE_PATH, "d"),
    "rename": (lua.RENAME, "a.txt", "b.txt"),
}


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with running_redis(tmp_path_factory.mktemp("redis")) as port:
        yield port


@pytest.fixture
def db(redis_port: int, request: pytest.FixtureRequest) -> Iterator[RedisMemory]:
    """A namespace of this test's own with a key, a file and a folder in it."""
    memory = RedisMemory(f"redis://127.0.0.1:{redis_port}/0", request.node.name)
    assert memory.run(lua.WRITE, "k.json", b"old", 10)[0] == "new"
    assert memory.run(lua.CREATE, "a.txt", b"old")[0] == "ok"
    assert memory.run(lua.CREATE, "d/f.txt", b"old")[0] == "ok"
    yield memory
    memory.client().delete(*memory.keys, FENCE_KEY)


def _dump(db: RedisMemory) -> dict[str, object]:
    client: redis.Redis = db.client()
    return {key: client.hgetall(key) for key in db.keys}


def _args(name: str, db: RedisMemory) -> tuple:
    source, *args = CHANGES[name]
    if name == "replace_if":  # the version the file has: a change the script would make
        args[1] = db.client().hget(db.k_versions, "a.txt")
    return source, *args


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_a_superseded_fence_changes_nothing(db: RedisMemory, name: str) -> None:
    db.client().set(FENCE_KEY, 1_000_001)  # another launcher's grant came after ours
    before = _dump(db)
    source, *args = _args(name, db)
    assert db.run(source, *args, fence=(FENCE_KEY, 1_000_000)) == ["lock_lost"]
    assert _dump(db) == before


@pytest.mark.parametrize("lock_key", [1_000_000, None], ids=["current", "lock-elsewhere"])
@pytest.mark.parametrize("name", sorted(CHANGES))
def test_the_current_fence_writes_and_no_fence_is_no_check(
    db: RedisMemory, name: str, lock_key: int | None
) -> None:
    """A fence equal to the key's writes; so does one whose lock keeps its key on another Redis
    (no key here: nothing to compare with), and a call without a fence."""
    if lock_key is not None:
        db.client().set(FENCE_KEY, lock_key)
    source, *args = _args(name, db)
    assert db.run(source, *args, fence=(FENCE_KEY, 1_000_000))[0] in ("ok", "replaced")
    db.client().set(FENCE_KEY, 2_000_000)
    before = _dump(db)
    assert db.run(lua.WRITE, "k.json", b"unfenced", 10)[0] in ("replaced", "new")
    assert _dump(db) != before
