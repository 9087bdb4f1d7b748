"""Tasks of external servers through the root (launcher/compose/tasks.py): ``tasks`` declared
as the server declares it, each ``tasks/*`` request sent to the server that made the task.
(With server-everything over stdio: tests/end_to_end/test_differential_everything.py.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from doc_processing_std_tools.launcher.compose import tasks as tasks_module
from doc_processing_std_tools.launcher.compose.tasks import Tasks
from helpers.compositions import Composed

DECLARED = mcp_types.ServerTasksCapability(list={}, cancel={})


class FakeFront:
    def __init__(self, declares: bool) -> None:
        capabilities = mcp_types.ServerCapabilities(tasks=DECLARED if declares else None)
        self.client = SimpleNamespace(initialize_result=SimpleNamespace(capabilities=capabilities))
        self.tasks: dict[str, str] = {}  # task id -> the client session it was made for
        self.calls: list[Any] = []

    def owns(self, task_id: Any, session: Any) -> bool:
        return self.tasks.get(task_id) == session

    @contextlib.contextmanager
    def calling(self, session: Any, request_id: Any) -> Iterator[None]:
        self.calls.append((session, request_id))
        yield


def external(
    name: str, namespace: str, *, declares: bool = True, tools: tuple[Any, ...] = ()
) -> Any:
    front = FakeFront(declares)

    async def client() -> Any:
        return name

    async def own_session(session: Any) -> None:
        return None  # (the shared session serves every client here)

    supervisor = SimpleNamespace(front=front, client=client, own_session=own_session)
    return SimpleNamespace(
        name=name,
        supervisor=supervisor,
        entry=SimpleNamespace(namespace=namespace),
        tools=list(tools),
    )


def request(
    method: str,
    params: dict[str, Any] | None = None,
    session: str = "session",
    version: str = "2025-11-25",
) -> Any:
    return SimpleNamespace(
        method=method, params=params, session=session, request_id=7, protocol_version=version
    )


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, dict[str, Any]]]:
    """What each server was asked (``send_raw_request`` stubbed: server name, method, params)."""
    seen: list[tuple[str, str, dict[str, Any]]] = []

    async def send(client: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        seen.append((client, method, params))
        if method == "tasks/list":
            if client == "down":
                raise MCPError(mcp_types.INTERNAL_ERROR, "server 'down' is restarting")
            return {"tasks": [{"taskId": f"{client}-1"}, {"taskId": f"{client}-other"}]}
        link = {"type": "resource_link", "uri": "demo://r/1", "name": "r"}
        return {"content": [link]}

    monkeypatch.setattr(tasks_module, "send_raw_request", send)
    return seen


async def test_tasks_is_declared_as_the_first_server_declaring_it() -> None:
    middleware = Tasks(Composed(mounts=[external("a", "a", declares=False), external("b", "b")]))

    async def initialize(ctx: Any) -> dict[str, Any]:
        return {"capabilities": {"tools": {}}}

    result = await middleware(request("initialize"), initialize)
    assert result["capabilities"]["tasks"] == {"list": {}, "cancel": {}}
    alone = Tasks(Composed(mounts=[external("a", "a", declares=False)]))
    assert "tasks" not in (await alone(request("initialize"), initialize))["capabilities"]


async def test_a_tasks_request_goes_to_the_server_that_made_the_task(asked: list[Any]) -> None:
    a, b = external("a", "a"), external("b", "ev")
    b.supervisor.front.tasks["t1"] = "session"
    middleware = Tasks(Composed(mounts=[a, b]))
    result = await middleware(request("tasks/result", {"taskId": "t1"}), None)
    assert asked == [("b", "tasks/result", {"taskId": "t1"})]
    assert result["content"][0]["uri"] == "demo://ev/r/1"  # (its links as exposed)
    assert b.supervisor.front.calls == [("session", 7)]  # (what it asks meanwhile: this client)
    with pytest.raises(MCPError) as unknown:
        await middleware(request("tasks/get", {"taskId": "nope"}), None)
    assert unknown.value.code == mcp_types.INVALID_PARAMS


async def test_another_clients_task_is_unknown_and_its_server_is_not_asked(
    asked: list[Any],
) -> None:
    b = external("b", "ev")
    b.supervisor.front.tasks["t1"] = "session"
    middleware = Tasks(Composed(mounts=[b]))
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        with pytest.raises(MCPError) as refused:
            await middleware(request(method, {"taskId": "t1"}, session="other"), None)
        assert refused.value.code == mcp_types.INVALID_PARAMS
        assert "unknown task 't1'" in refused.value.error.message
    assert asked == []


async def test_tasks_list_asks_every_server_declaring_tasks_and_shows_own_tasks_only(
    asked: list[Any],
) -> None:
    a, b, down = external("a", "a"), external("b", "b"), external("down", "d")
    a.supervisor.front.tasks.update({"a-1": "session", "a-other": "other"})
    b.supervisor.front.tasks.update({"b-1": "session", "b-other": "other"})
    down.supervisor.front.tasks["down-1"] = "session"
    middleware = Tasks(Composed(mounts=[a, down, b]))
    listed = await middleware(request("tasks/list", {}), None)
    assert listed == {"tasks": [{"taskId": "a-1"}, {"taskId": "b-1"}]}  # (a server down: left out)
    alone = Tasks(Composed(mounts=[a]))
    assert await alone(request("tasks/list", {}, session="other"), None) == {
        "tasks": [{"taskId": "a-other"}]
    }
    none = Tasks(Composed(mounts=[external("a", "a", declares=False)]))
    with pytest.raises(MCPError) as refused:
        await none(request("tasks/list", {}), None)
    assert refused.value.code == mcp_types.METHOD_NOT_FOUND


async def test_task_only_tools_are_listed_only_when_tasks_are_declared() -> None:
    tools = [
        {"name": "ev_plain"},
        {"name": "ev_either", "execution": {"taskSupport": "optional"}},
        {"name": "ev_task", "execution": {"taskSupport": "required"}},
    ]

    async def listing(ctx: Any) -> dict[str, Any]:
        return {"tools": tools}

    offered = Tasks(Composed(mounts=[external("ev", "ev")]))
    assert (await offered(request("tools/list"), listing))["tools"] == tools
    none = Tasks(Composed(mounts=[external("ev", "ev", declares=False)]))
    shown = (await none(request("tools/list"), listing))["tools"]
    assert [t["name"] for t in shown] == ["ev_plain", "ev_either"]


async def test_a_2026_era_client_is_not_listed_task_only_tools() -> None:
    """Its tasks are an extension the launcher does not serve, and its list (sieved to that
    protocol) no longer says which tools need one: the mounts' tools do."""
    required = SimpleNamespace(task_support="required")
    listed = [
        SimpleNamespace(name="ev_plain", execution=None),
        SimpleNamespace(name="ev_either", execution=SimpleNamespace(task_support="optional")),
        SimpleNamespace(name="ev_task", execution=required),
    ]

    async def listing(ctx: Any) -> dict[str, Any]:
        return {"tools": [{"name": "ev_plain"}, {"name": "ev_either"}, {"name": "ev_task"}]}

    offered = Tasks(Composed(mounts=[external("ev", "ev", tools=tuple(listed))]))
    shown = (await offered(request("tools/list", version="2026-07-28"), listing))["tools"]
    assert [t["name"] for t in shown] == ["ev_plain", "ev_either"]
    handshake = (await offered(request("tools/list"), listing))["tools"]
    assert [t["name"] for t in handshake] == ["ev_plain", "ev_either", "ev_task"]
