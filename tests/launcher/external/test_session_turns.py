"""``SessionTurns``: one client session's calls at a time reach a server, in turn, none starved
(the rule that keeps a server's own requests tied to the one session they can be for)."""

from __future__ import annotations

import anyio

from doc_processing_std_tools.launcher.external.client_requests import SessionTurns


class Session:
    """A client session (the turns key on its connection: here the object itself)."""


async def test_sessions_take_turns_and_a_waiting_one_is_not_starved() -> None:
    turns, a, b = SessionTurns(), Session(), Session()
    log: list[str] = []
    release = {name: anyio.Event() for name in ("a1", "a2", "a3", "b1")}

    async def call(name: str, session: Session) -> None:
        async with turns.turn(session):
            log.append(f"{name} in")
            await release[name].wait()
            log.append(f"{name} out")

    async with anyio.create_task_group() as group:
        group.start_soon(call, "a1", a)
        group.start_soon(call, "a2", a)  # same session: runs together with a1
        await anyio.wait_all_tasks_blocked()
        group.start_soon(call, "b1", b)  # waits for a's turn to end
        await anyio.wait_all_tasks_blocked()
        group.start_soon(call, "a3", a)  # b waits: a's new call goes after it
        await anyio.wait_all_tasks_blocked()
        assert log == ["a1 in", "a2 in"]
        release["a1"].set()
        release["a2"].set()
        await anyio.wait_all_tasks_blocked()
        assert log[-1] == "b1 in" and "a3 in" not in log
        release["b1"].set()
        await anyio.wait_all_tasks_blocked()
        assert log[-1] == "a3 in"
        release["a3"].set()
    assert turns.owner is None and turns.running == 0 and not turns.waiting


async def test_a_waiting_call_that_is_cancelled_leaves_no_turn_behind() -> None:
    turns, a, b, c = SessionTurns(), Session(), Session(), Session()
    hold = anyio.Event()
    entered: list[str] = []

    async def hold_a() -> None:
        async with turns.turn(a):
            await hold.wait()

    async def enter(name: str, session: Session) -> None:
        async with turns.turn(session):
            entered.append(name)

    async with anyio.create_task_group() as group:
        group.start_soon(hold_a)
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await enter("b", b)  # cancelled while it waits for a's turn
        group.start_soon(enter, "c", c)
        await anyio.wait_all_tasks_blocked()
        hold.set()
    assert entered == ["c"]
    assert turns.owner is None and not turns.waiting
