"""The pool of a server's sessions of single clients (``sessions: per_client``): bounded, closed
when idle, and each client's child stopped and reaped when its client leaves."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest

from doc_processing_std_tools.launcher.config.schema import ServerEntry
from doc_processing_std_tools.launcher.external.supervisor import Supervisor
from helpers.paths import SERVERS
from helpers.processes import alive, child_pids
from helpers.waiting import until

EXTERNAL = SERVERS / "external_server.py"


class FakeConnection:
    """What the pool reads of a client's MCP connection: its handshake and its teardown."""

    def __init__(self, name: str, protocol_version: str = "2025-11-25") -> None:
        self.protocol_version = protocol_version
        self.client_params = mcp_types.InitializeRequestParams(
            protocol_version=protocol_version,
            capabilities=mcp_types.ClientCapabilities(),
            client_info=mcp_types.Implementation(name=name, version="1.0"),
        )
        self.client_capabilities = self.client_params.capabilities
        self.exit_stack = AsyncExitStack()
        self.state: dict[str, Any] = {}


class FakeSession:
    """A client session as the launcher's request handlers see it."""

    def __init__(self, name: str, protocol_version: str = "2025-11-25") -> None:
        self._connection = FakeConnection(name, protocol_version)


@asynccontextmanager
async def supervised(tmp_path: Path, **keys: Any) -> AsyncIterator[Supervisor]:
    entry = ServerEntry(
        command=sys.executable,
        args=[str(EXTERNAL), str(tmp_path / "counter")],
        sessions="per_client",
        **keys,
    )
    supervisor = Supervisor("ext", entry, tmp_path)
    async with anyio.create_task_group() as group:
        group.start_soon(supervisor.run)
        await supervisor.wait_started()
        try:
            yield supervisor
        finally:
            supervisor.stop()


async def pid_of(supervisor: Supervisor, front: FakeSession) -> int:
    client = await supervisor.client(front)
    result = await client.call_tool_mcp("whoami", {})
    return int(result.content[0].text)  # type: ignore[union-attr]


def gone(pid: int) -> bool:
    """*pid* ended and was reaped (no zombie left among this process's children either)."""
    return not alive(pid) and not [p for p in child_pids(os.getpid()) if not alive(p)]


async def test_each_client_has_its_own_child_stopped_and_reaped_when_it_leaves(
    tmp_path: Path,
) -> None:
    async with supervised(tmp_path) as supervisor:
        shared = await pid_of(supervisor, None)  # type: ignore[arg-type]
        ann, bob = FakeSession("ann"), FakeSession("bob")
        ann_pid, bob_pid = await pid_of(supervisor, ann), await pid_of(supervisor, bob)
        assert len({shared, ann_pid, bob_pid}) == 3
        assert await pid_of(supervisor, ann) == ann_pid  # (the same session for each call)
        assert supervisor.pool_size() == (2, supervisor.entry.max_sessions)
        await ann._connection.exit_stack.aclose()  # ann's client leaves (DELETE, expiry, EOF)
        await until(lambda: gone(ann_pid), "ann's child stopped and reaped")
        assert supervisor.pool_size()[0] == 1
        assert alive(bob_pid) and alive(shared)


@pytest.mark.slow  # (children of its own: seconds)
async def test_the_pool_is_bounded_and_closes_the_least_recently_used(tmp_path: Path) -> None:
    async with supervised(tmp_path, max_sessions=2) as supervisor:
        first, second, third = FakeSession("1"), FakeSession("2"), FakeSession("3")
        first_pid = await pid_of(supervisor, first)
        second_pid = await pid_of(supervisor, second)
        await pid_of(supervisor, first)  # (second is now the least recently used)
        await pid_of(supervisor, third)
        await until(lambda: gone(second_pid), "the least recently used child stopped")
        assert supervisor.pool_size() == (2, 2) and alive(first_pid)


@pytest.mark.slow  # (children of its own: seconds)
async def test_a_full_pool_of_busy_sessions_says_which_setting_to_raise(tmp_path: Path) -> None:
    async with supervised(tmp_path, max_sessions=1) as supervisor:
        busy = await supervisor.client(FakeSession("busy"))
        async with anyio.create_task_group() as group:
            group.start_soon(busy.call_tool_mcp, "nap", {"seconds": 30})
            await until(
                lambda: supervisor.pool.get(next(iter(supervisor.pool._sessions))).busy(),
                "a call in flight",
            )  # type: ignore[union-attr]
            with pytest.raises(Exception, match=r"raise servers\.ext\.max_sessions \(now 1\)"):
                await supervisor.client(FakeSession("another"))
            group.cancel_scope.cancel()


@pytest.mark.slow  # (children of its own: seconds)
async def test_an_idle_session_is_closed(tmp_path: Path) -> None:
    async with supervised(tmp_path, session_idle_timeout=1.0) as supervisor:
        pid = await pid_of(supervisor, FakeSession("idle"))
        await until(lambda: gone(pid), "the idle session's child stopped")
        assert supervisor.pool_size()[0] == 0


async def test_check_says_how_clients_map_to_sessions_and_what_a_shared_one_shares(
    tmp_path: Path,
) -> None:
    def line(**keys: Any) -> str:
        entry = ServerEntry(command=sys.executable, **keys)
        return Supervisor("ext", entry, tmp_path).sessions_line()

    assert line() == (
        "per_client: one per client session (0 of 16 open, closed after 600 s unused); "
        "over stdio the one client's is the launcher's own"
    )
    assert line(sessions="per_user", max_sessions=4).startswith(
        "per_user: one per signed-in user (0 of 4 open"
    )
    shared = line(sessions="shared")
    for what in ("roots", "log level", "subscriptions", "capabilities", "clientInfo"):
        assert what in shared


async def test_a_2026_era_client_shares_the_launchers_session(tmp_path: Path) -> None:
    """Its requests each stand alone: a session opened per request would be a child each."""
    entry = ServerEntry(command=sys.executable, sessions="per_client")
    supervisor = Supervisor("ext", entry, tmp_path)
    assert await supervisor.own_session(FakeSession("modern", "2026-07-28")) is None
