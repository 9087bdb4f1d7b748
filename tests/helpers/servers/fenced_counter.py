"""A counter kept in memory-tools' Redis store, for the fencing test, mounted with ``module:``
(``settings: {url: ...}``) and ``lock: always``: ``increment(hold)`` reads it, waits *hold*
seconds, and writes it plus one, a read-modify-write only the fleet lock keeps whole."""

from __future__ import annotations

import time

from fastmcp import FastMCP

from doc_processing_std_tools.memory import MemoryStoreError
from doc_processing_std_tools.memory.redis_connection import RedisMemory
from doc_processing_std_tools.memory.redis_store import RedisMemoryStore


def make_counter(url: str, namespace: str = "fenced-counter") -> FastMCP:
    store = RedisMemoryStore(RedisMemory(url, namespace))
    server = FastMCP("fenced-counter")

    @server.tool
    def increment(hold: float = 0.0) -> str:
        """Read the counter, wait *hold* seconds, write it plus one."""
        try:
            seen = int(store.read("counter"))
        except MemoryStoreError:
            seen = 0
        time.sleep(hold)
        store.write("counter", str(seen + 1))
        return f"counter {seen} -> {seen + 1}"

    return server
