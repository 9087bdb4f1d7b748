"""Waiting on what can be observed (a file, a log line, a state), with a deadline: never a sleep
that hopes something has happened by now."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")
WAIT = 30.0  # seconds a condition may take before the test fails (no timing is asserted)


def wait_for(condition: Callable[[], T], what: str, timeout: float = WAIT) -> T:
    """*condition*'s first truthy value, polled until *timeout* seconds; fails naming *what*."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.02)
    return found


async def until(condition: Callable[[], T | Awaitable[T]], what: str, timeout: float = WAIT) -> T:
    """:func:`wait_for` on the event loop: *condition* may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if isinstance(found, Awaitable):
            found = await found
        if found:
            return found  # type: ignore[return-value]
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        await anyio.sleep(0.02)
