"""popoto-memory's tests share a redis-server per module (database 1, emptied for each test) and
a server on it, reached through fastmcp's in-memory client."""

from __future__ import annotations

import pytest

pytest.importorskip("popoto")

import redis
from fastmcp import Client

from doc_processing_std_tools import popoto_memory as pm
from helpers.redis_server import REDIS_SERVER, SKIP_REASON, start_redis


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory):
    """A throw-away redis-server on a free port (no persistence)."""
    if REDIS_SERVER is None:
        pytest.skip(SKIP_REASON)
    proc, port = start_redis(tmp_path_factory.mktemp("redis"))
    yield port
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def redis_url(redis_port):
    redis.Redis(port=redis_port, db=1).flushdb()
    return f"redis://127.0.0.1:{redis_port}/1"


@pytest.fixture
def server(redis_url):
    return pm.create_server(pm.Settings(url=redis_url, agent_id="pytestagent"))


@pytest.fixture
async def client(server):
    async with Client(server) as c:
        yield c
