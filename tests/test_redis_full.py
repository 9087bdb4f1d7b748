"""memory-tools on a full Redis (issue 35, point 4): at ``maxmemory`` with ``noeviction`` a write
is refused with the one-line error that says to delete memories, and every delete tool then
works (delete_memory, memory_delete of a file and of a folder), so that a write fits again.
A real redis-server with a small maxmemory, filled through the tools."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastmcp import Client
from redis_helpers import REDIS_SERVER, SKIP_REASON, start_redis

from doc_processing_std_tools.memory import Settings, create_server

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

CHUNK = "x" * 20_000  # one value: a few hundred fill the headroom below


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[tuple[str, redis.Redis]]:
    """A redis-server that refuses writes once it holds about 2 MB more than when it started."""
    proc, port = start_redis(tmp_path)
    admin = redis.Redis(port=port)
    used = int(admin.info("memory")["used_memory"])
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", str(used + 2_000_000))
    try:
        yield f"redis://127.0.0.1:{port}/0", admin
    finally:
        admin.close()
        proc.kill()
        proc.wait()


async def call(client: Client, tool: str, **args: object) -> tuple[bool, str]:
    result = await client.call_tool(tool, args, raise_on_error=False)
    return result.is_error, "\n".join(b.text for b in result.content if hasattr(b, "text"))


async def fill(client: Client, prefix: str, tool: str = "write_memory") -> int:
    """Write through *tool* until Redis refuses: the number written (the refusal checked)."""
    for n in range(10_000):
        if tool == "write_memory":
            is_error, text = await call(client, tool, key=f"{prefix}{n}", value=CHUNK)
        else:
            is_error, text = await call(client, tool, path=f"{prefix}{n}.txt", file_text=CHUNK)
        if is_error:
            assert "out of memory" in text and "delete memories you no longer need" in text
            assert "\n" not in text, text
            return n
    raise AssertionError("Redis never refused a write")


async def still_full(client: Client) -> None:
    """Even a write of a few bytes is refused: Redis is over its maxmemory."""
    is_error, text = await call(client, "write_memory", key="probe", value="x")
    assert is_error and "out of memory" in text, text


async def test_every_delete_tool_frees_a_full_redis_and_writes_fit_again(
    full_redis: tuple[str, redis.Redis],
) -> None:
    url, admin = full_redis
    namespace = f"full-{os.getpid()}"
    files = f"dpt-memory:{{{namespace}}}:files"
    async with Client(create_server(Settings(url=url, namespace=namespace))) as client:
        for key in ("k0", "k1"):
            assert not (await call(client, "write_memory", key=key, value=CHUNK))[0]
        assert await fill(client, "notes/n", "memory_create") > 10
        # The refused write's own 20 KB counted: a few KB freed would let small writes in again.
        # Pinned 64 KB under what is used, Redis stays full until the folder goes.
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", str(used - 64_000))

        await still_full(client)
        assert await call(client, "delete_memory", key="k0") == (False, "Memory 'k0' deleted.")
        assert not admin.hexists(files, "k0.json")
        await still_full(client)
        assert await call(client, "memory_delete", path="k1.json") == (
            False,
            "Successfully deleted /k1.json",
        )
        assert not admin.hexists(files, "k1.json")
        await still_full(client)
        assert await call(client, "memory_delete", path="notes") == (
            False,
            "Successfully deleted /notes",
        )
        assert not [n for n in admin.hkeys(files) if n.startswith(b"notes/")]

        assert await call(client, "write_memory", key="after", value=CHUNK) == (
            False,
            "Memory 'after' saved.",
        )
        assert await call(client, "read_memory", key="after") == (False, CHUNK)
