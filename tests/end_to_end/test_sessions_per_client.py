"""Sessions upstream per client (``sessions: per_client``) in a real HTTP launcher: clients that
come and go leave no child and no upstream session behind, and ``/ready`` and ``/metrics`` show
the pool."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from helpers.differential import everything_argv, mount_config
from helpers.launch import http_launcher, text_of
from helpers.paths import SERVERS
from helpers.processes import alive, descendant_pids
from helpers.rpc import open_session, request, rpc
from helpers.waiting import wait_for

PROBE = SERVERS / "probe_server.py"
CLIENTS, AT_ONCE = 50, 5


def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(
        f"servers:\n  probe:\n    command: {sys.executable}\n    args: [{PROBE}]\n"
        "    namespace: pr\n    sessions: per_client\n    max_sessions: 8\n",
        encoding="utf-8",
    )
    return path


def pool(port: int) -> dict[str, int]:
    return request(port, "GET", "/ready").json()["servers"]["probe"]["sessions"]  # type: ignore[no-any-return]


def pool_metrics(port: int) -> list[str]:
    text = request(port, "GET", "/metrics").body.decode()
    return [line for line in text.splitlines() if line.startswith("dpt_external_sessions_")]


@pytest.mark.slow  # fifty clients, each with a child of its own
async def test_fifty_clients_coming_and_going_leave_nothing_behind(tmp_path: Path) -> None:
    with http_launcher(config_file(tmp_path)) as launched:
        before = set(descendant_pids(launched.proc.pid))  # (the launcher's own session)
        names: list[str] = []

        async def one_client(number: int) -> None:
            async with (
                streamable_http_client(launched.url) as (read, write, *_),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                result = await session.call_tool("pr_seen", {"what": "clientInfo"})
                names.append(text_of(result))
            # (leaving ends the session with an HTTP DELETE)

        with anyio.fail_after(300):
            for start in range(0, CLIENTS, AT_ONCE):
                async with anyio.create_task_group() as group:
                    for number in range(start, start + AT_ONCE):
                        group.start_soon(one_client, number)
        assert len(names) == CLIENTS and all("mcp" in name for name in names), names[:3]
        wait_for(lambda: pool(launched.port)["open"] == 0, "every client's session closed")
        wait_for(
            lambda: set(descendant_pids(launched.proc.pid)) == before,
            "no child left beside the launcher's own",
        )
        assert all(alive(pid) for pid in before)
        assert pool(launched.port) == {"mode": "per_client", "open": 0, "max": 8}
        assert pool_metrics(launched.port) == [
            'dpt_external_sessions_open{server="probe"} 0.0',
            'dpt_external_sessions_max{server="probe"} 8.0',
        ]


@pytest.mark.slow  # a launcher and a node child per client
def test_a_clients_task_lives_on_its_own_session_and_is_no_one_elses(tmp_path: Path) -> None:
    """Over HTTP with ``sessions: per_client`` a task made by client A is asked about on A's own
    upstream session (where the server made it); client B cannot see, read or cancel it."""
    config = mount_config(
        tmp_path / "tools.yaml",
        everything_argv(),
        mount="everything",
        namespace="ev",
        extra="sessions: per_client",
    )
    with http_launcher(config) as launched:
        port = launched.port
        a, b = open_session(port, client="a"), open_session(port, client="b")
        call = {"name": "ev_simulate-research-query", "arguments": {"topic": "x"}, "task": {}}
        created = rpc(port, "tools/call", call, session=a).message(1)
        task_id = created["result"]["task"]["taskId"]
        asked = {"taskId": task_id}
        assert rpc(port, "tasks/get", asked, session=a).message(1)["result"]["taskId"] == task_id
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            refused = rpc(port, method, asked, session=b).message(1)
            assert "unknown task" in refused["error"]["message"], refused
        listed = rpc(port, "tasks/list", {}, session=b).message(1)["result"]["tasks"]
        assert task_id not in {task["taskId"] for task in listed}
        result = rpc(port, "tasks/result", asked, session=a).message(1)["result"]
        assert result["content"][0]["type"] == "text"
        mine = rpc(port, "tasks/list", {}, session=a).message(1)["result"]["tasks"]
        assert task_id in {task["taskId"] for task in mine}
