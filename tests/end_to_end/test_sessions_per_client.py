"""Sessions upstream per client (``sessions: per_client``) in a real HTTP launcher: clients that
come and go leave no child and no upstream session behind, the first client's session runs in
the child started with the launcher (and an untaken one is stopped after the idle timeout), and
``/ready`` and ``/metrics`` show the pool."""

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
from helpers.waiting import until, wait_for

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


def early_metrics(port: int) -> dict[str, float]:
    """The probe's ``dpt_external_early_children*`` figures, by metric name."""
    text = request(port, "GET", "/metrics").body.decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("dpt_external_early_children") and 'server="probe"' in line:
            name, value = line.split("{", 1)[0], line.rsplit(" ", 1)[1]
            found[name] = float(value)
    return found


async def server_pid(url: str, until_closed: anyio.Event, pids: list[int]) -> None:
    """A client whose own child's server process id is appended to *pids*; it stays connected
    until *until_closed* is set."""
    async with (
        streamable_http_client(url) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        pids.append(int(text_of(await session.call_tool("pr_seen", {"what": "pid"}))))
        await until_closed.wait()


@pytest.mark.slow  # fifty clients, each with a child of its own
async def test_fifty_clients_coming_and_going_leave_nothing_behind(tmp_path: Path) -> None:
    with http_launcher(config_file(tmp_path)) as launched:
        # (the launcher's own session, and the child started for the first client)
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
        # the first client took the early child: what stays is the launcher's own, half of it
        wait_for(
            lambda: len(descendant_pids(launched.proc.pid)) == len(before) // 2,
            "no child left beside the launcher's own",
        )
        assert set(descendant_pids(launched.proc.pid)) < before
        assert pool(launched.port) == {"mode": "per_client", "open": 0, "max": 8}
        assert pool_metrics(launched.port) == [
            'dpt_external_sessions_open{server="probe"} 0.0',
            'dpt_external_sessions_max{server="probe"} 8.0',
        ]


async def test_the_first_client_takes_the_child_started_with_the_launcher(tmp_path: Path) -> None:
    """Over HTTP the first client's own session runs in the child started with the launcher
    (its server's pid was a descendant before the client came); a second client at the same
    time gets a child of its own, started for it."""
    with http_launcher(config_file(tmp_path)) as launched:
        port = launched.port
        assert early_metrics(port) == {
            "dpt_external_early_children": 1.0,
            "dpt_external_early_children_taken_total": 0.0,
            "dpt_external_early_children_unused_total": 0.0,
        }
        before = set(descendant_pids(launched.proc.pid))
        done, pids = anyio.Event(), []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(server_pid, launched.url, done, pids)
                await until(lambda: len(pids) == 1, "the first client's call")
                group.start_soon(server_pid, launched.url, done, pids)
                await until(lambda: len(pids) == 2, "the second client's call")
                done.set()
        first, second = pids
        assert first in before, (first, before)  # started before the client came
        assert second not in before and second != first  # its own, started for it
        assert early_metrics(port) == {
            "dpt_external_early_children": 0.0,
            "dpt_external_early_children_taken_total": 1.0,
            "dpt_external_early_children_unused_total": 0.0,
        }


@pytest.mark.slow  # a launcher waiting out an idle timeout
def test_a_child_started_for_a_first_client_that_never_came_is_stopped(tmp_path: Path) -> None:
    """No client within ``session_idle_timeout``: the child started for the first one is
    stopped and reaped, counted as unused; the launcher's own session stays."""
    with http_launcher(config_file(tmp_path, idle=1)) as launched:
        launcher = launched.proc.pid
        wait_for(
            lambda: early_metrics(launched.port).get("dpt_external_early_children") == 0.0,
            "the early child stopped",
        )
        assert early_metrics(launched.port)["dpt_external_early_children_unused_total"] == 1.0
        shared = set(descendant_pids(launcher))
        assert shared and all(alive(pid) for pid in shared)
        # the launcher's one session: the shim and its server (the early one's pair is gone)
        assert len(shared) == 2, shared
        ready = request(launched.port, "GET", "/ready").json()["servers"]["probe"]
        assert ready["state"] == "up"


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
