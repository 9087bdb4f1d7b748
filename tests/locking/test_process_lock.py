"""The admission gate for calls of servers that take the process lock themselves."""

from __future__ import annotations

import anyio
import pytest

from doc_processing_std_tools.locking import SELF_LOCKING_CALLS, CallGate, admit_self_locking


async def test_the_gate_lets_in_at_most_its_capacity_in_arrival_order() -> None:
    gate = CallGate(lambda: 2)
    inside: list[int] = []
    most = 0
    order: list[int] = []
    release = anyio.Event()

    async def call(i: int) -> None:
        nonlocal most
        await gate.enter()
        try:
            order.append(i)
            inside.append(i)
            most = max(most, len(inside))
            await release.wait()
            inside.remove(i)
        finally:
            gate.leave()

    async with anyio.create_task_group() as group:
        for i in range(6):
            group.start_soon(call, i)
            await anyio.sleep(0)  # arrive in order
        await anyio.wait_all_tasks_blocked()
        assert inside == [0, 1]  # the others wait
        release.set()
    assert most == 2
    assert order == list(range(6))


@pytest.mark.parametrize("waiters", [1, 30])
async def test_a_cancelled_wait_leaves_the_gate_as_it_was(waiters: int) -> None:
    gate = CallGate(lambda: 1)

    async def wait_then_give_up() -> None:
        with anyio.move_on_after(0.01):
            await gate.enter()
            pytest.fail("the gate was full")

    await gate.enter()
    async with anyio.create_task_group() as group:
        for _ in range(waiters):
            group.start_soon(wait_then_give_up)
    gate.leave()
    with anyio.fail_after(5):  # the place is free again
        await gate.enter()
    gate.leave()


async def test_self_locking_calls_take_at_most_half_the_worker_threads() -> None:
    limit = anyio.to_thread.current_default_thread_limiter().total_tokens
    inside = 0
    most = 0
    release = anyio.Event()

    async def call() -> None:
        nonlocal inside, most
        async with admit_self_locking():
            inside += 1
            most = max(most, inside)
            await release.wait()
            inside -= 1

    async with anyio.create_task_group() as group:
        for _ in range(int(limit)):
            group.start_soon(call)
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert most == limit // 2
    assert SELF_LOCKING_CALLS._inside == 0
