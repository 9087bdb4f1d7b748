"""Sessions upstream per client (``sessions: per_client``) in a real HTTP launcher: clients that
come and go leave no child and no upstream session behind, a client's first list does not wait
for its own child (the launcher's own session answers it; ``list_changed`` when its own lists
differently), nothing is started for a client before it comes, and ``/ready`` and ``/metrics``
show the pool."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from helpers.differential import everything_argv, mount_config
from helpers.launch import http_launcher, text_of
from helpers.paths import SERVERS
from helpers.processes import descendant_pids
from helpers.rpc import open_session, request, rpc
from helpers.waiting import wait_for

PROBE = SERVERS / "probe_server.py"
CLIENTS, AT_ONCE = 50, 5


def config_file(tmp_path: Path, idle: float | None = None) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(
        f"servers:\n  probe:\n    command: {sys.executable}\n    args: [{PROBE}]\n"
        "    namespace: pr\n    sessions: per_client\n    max_sessions: 8\n"
        + (f"    session_idle_timeout: {idle}\n" if idle is not None else ""),
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
        # (the launcher's own session)
        before = set(descendant_pids(launched.proc.pid))
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
        assert pool(launched.port) == {"mode": "per_client", "open": 0, "max": 8}
        assert pool_metrics(launched.port) == [
            'dpt_external_sessions_open{server="probe"} 0.0',
            'dpt_external_sessions_max{server="probe"} 8.0',
        ]


async def test_a_clients_first_list_does_not_wait_for_its_own_child(tmp_path: Path) -> None:
    """Nothing is started for a client before it comes. While its own child is still starting,
    its ``tools/list`` is answered by the launcher's own session (which declares ``sampling``, so
    the probe lists it ``sample`` too); its calls wait for, and go to, its own child, opened with
    its own capabilities; once that child is up and lists otherwise, the client is told
    ``list_changed`` and lists what the server shows it."""
    gate = tmp_path / "own-child-may-start"
    with http_launcher(config_file(tmp_path), env={"PROBE_BY_SAMPLING": str(gate)}) as launched:
        assert len(descendant_pids(launched.proc.pid)) == 2  # (its own session: shim, probe)
        changed = anyio.Event()

        async def on_message(message: object) -> None:
            method = getattr(getattr(message, "root", message), "method", None)
            if method == "notifications/tools/list_changed":
                changed.set()

        async with (
            streamable_http_client(launched.url) as (read, write, *_),
            ClientSession(read, write, message_handler=on_message) as session,
        ):
            with anyio.fail_after(30):
                await session.initialize()
                first = {tool.name for tool in (await session.list_tools()).tools}
                assert first == {"pr_seen", "pr_custom", "pr_overlong", "pr_sample"}
                assert not changed.is_set()
                calling = anyio.Event()
                said: list[str] = []

                async def call() -> None:
                    calling.set()
                    result = await session.call_tool("pr_seen", {"what": "capabilities"})
                    said.append(text_of(result))

                async with anyio.create_task_group() as group:
                    group.start_soon(call)
                    await calling.wait()
                    gate.touch()  # (its own child answers initialize now)
                await changed.wait()
                after = {tool.name for tool in (await session.list_tools()).tools}
        assert after == {"pr_seen", "pr_custom", "pr_overlong"}
        assert "sampling" not in json.loads(said[0])  # its own child, with its capabilities


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
