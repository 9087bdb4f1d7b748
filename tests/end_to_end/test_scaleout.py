"""Scale-out: two stateless launchers on one config, every request of one client alternating.

The launchers share what docs/scaling.md says must be shared: one memory folder
(the flock guarantee), one filesystem root and, when popoto and a redis-server
are available, one Redis for popoto-memory.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import anyio
import pytest

from helpers.launch import http_launcher
from helpers.redis_server import REDIS_SERVER, running_redis
from helpers.rpc import initialize_params, message, reply_message, rpc_headers

HAVE_POPOTO = importlib.util.find_spec("popoto") is not None and REDIS_SERVER is not None


@pytest.fixture
def two_launchers(tmp_path: Path) -> Iterator[tuple[list[str], Path]]:
    """Two stateless launchers on one config (ports of their own), and the shared folder."""
    shared = tmp_path / "shared"
    (shared / "root").mkdir(parents=True)
    with running_redis(tmp_path) if HAVE_POPOTO else nullcontext() as redis_port:
        popoto = (
            "  popoto-memory:\n"
            "    namespace: pm\n"
            "    settings:\n"
            "      backend: redis\n"
            f"      url: redis://127.0.0.1:{redis_port}/1\n"
            "      agent_id: scaleout\n"
            if HAVE_POPOTO
            else ""
        )
        config = tmp_path / "tools.yaml"
        config.write_text(
            "transport: {type: http, stateless: true}\n"
            "servers:\n"
            "  memory:\n"
            "    server: memory-tools\n"
            f"    settings: {{memory_dir: {json.dumps(str(shared / 'memory'))}}}\n"
            "  filesystem:\n"
            f"    settings: {{roots: [{json.dumps(str(shared / 'root'))}]}}\n" + popoto,
            encoding="utf-8",
        )
        # stateless HTTP comes from the config's transport; each launcher logs on its own
        one = http_launcher(config, args=(), cwd=tmp_path, errlog=tmp_path / "1.log")
        two = http_launcher(config, args=(), cwd=tmp_path, errlog=tmp_path / "2.log")
        with one as first, two as second:
            assert first.url != second.url
            yield [first.url, second.url], shared


class RoundRobinClient:
    """One MCP client whose every HTTP request goes to the next launcher in turn."""

    def __init__(self, http: Any, urls: list[str]) -> None:
        self.http = http
        self.turn = itertools.cycle(urls)
        self.ids = itertools.count(1)
        self.served_by: dict[str, int] = dict.fromkeys(urls, 0)

    async def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        url = next(self.turn)
        self.served_by[url] += 1
        request_id = next(self.ids)
        response = await self.http.post(
            url, json=message(method, params, id=request_id), headers=rpc_headers()
        )
        assert response.status_code == 200, response.text
        reply = reply_message(response.headers["content-type"], response.text, request_id)
        assert "error" not in reply, reply
        return reply["result"]

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        result = await self.rpc("tools/call", {"name": tool, "arguments": arguments})
        text = "".join(block.get("text", "") for block in result["content"])
        assert not result.get("isError"), f"{tool}: {text}"
        return text


@pytest.mark.slow  # (two launchers and a bridge: a small fleet)
async def test_two_stateless_launchers_serve_one_client_alternately(two_launchers) -> None:
    import httpx2

    urls, shared = two_launchers
    async with httpx2.AsyncClient(timeout=60) as http:
        client = RoundRobinClient(http, urls)
        init = await client.rpc("initialize", initialize_params("round-robin"))
        assert init["serverInfo"]["name"]
        await client.call("memory_create", {"path": "log.md", "file_text": ""})

        # 100 mixed calls in a fixed cycle; consecutive calls always hit different launchers,
        # so every read or edit checks a write the other launcher made.
        calls = 0
        step = 0
        while calls < 100:
            name = f"n{step}"
            await client.call(
                "memory_create", {"path": f"notes/{name}.md", "file_text": f"note {step}\n"}
            )
            await client.call(
                "memory_str_replace",
                {
                    "path": f"notes/{name}.md",
                    "old_str": f"note {step}",
                    "new_str": f"edited {step}",
                },
            )
            assert f"edited {step}" in await client.call(
                "memory_view", {"path": f"notes/{name}.md"}
            )
            await client.call("write_file", {"path": f"{name}.txt", "content": f"file {step}"})
            assert await client.call("read_text_file", {"path": f"{name}.txt"}) == f"file {step}"
            await client.call(
                "memory_insert", {"path": "log.md", "insert_line": 0, "insert_text": f"step {step}"}
            )
            calls += 6
            if HAVE_POPOTO:
                fact = f"Scale-out fact number {step} is zebra{step}."
                await client.call("pm_memory_save", {"content": fact})
                found = await client.call("pm_memory_search", {"query": f"zebra{step}"})
                assert fact in found
                calls += 2
            step += 1

        # Overlapping writes through both launchers at once: the flock across processes holds.
        async def insert(number: int) -> None:
            await client.call(
                "memory_insert",
                {"path": "log.md", "insert_line": 0, "insert_text": f"burst {number}"},
            )

        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for number in range(40):
                    group.start_soon(insert, number)
        calls += 40

    assert calls >= 100
    assert min(client.served_by.values()) >= calls // 2 - 1  # both really served
    for n in range(step):  # no lost write
        assert (shared / "memory" / "notes" / f"n{n}.md").read_text() == f"edited {n}\n"
        assert (shared / "root" / f"n{n}.txt").read_text() == f"file {n}"
    lines = (shared / "memory" / "log.md").read_text().splitlines()
    expected = [f"step {n}" for n in range(step)] + [f"burst {n}" for n in range(40)]
    assert sorted(lines) == sorted(expected)
