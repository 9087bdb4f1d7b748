"""The stdio client's ``initialize``, read before serving starts, so that each external server's
session is opened with the client's own ``clientInfo`` and capabilities, as on a direct connection.

Over the launcher's stdio there is one client, and its session to each external server is the
supervisor's own. The client spawned the launcher and sends ``initialize`` at once, but serving
reads stdin only once the composition is built, after the external servers' first sessions. So
while the launcher imports and composes, the event loop reads stdin up to the end of the first
line (:func:`listen`): a :class:`.Supervisor` opens its session with that line's ``initialize``
params (:func:`client_params`, waiting at most ``start_grace``; a restart uses them again), and
the stdio transport serves the bytes read first (:func:`take`). ``--check``, the verbs and HTTP
have no single client: nothing listens, and the sessions say the launcher's own name and every
capability. This module imports neither fastmcp nor the mcp SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
from typing import Any

import anyio

MAX_HELLO = 1 << 20  # bytes read while no line has ended: past this, the launcher's params


class _Hello:
    """What was read of stdin before serving, and the ``initialize`` params in its first line."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop, grace: float) -> None:
        self.fd = fd
        self.loop = loop
        self.deadline = loop.time() + grace
        self.read = bytearray()
        self.params: dict[str, Any] | None = None
        self.listening = True
        self.done = asyncio.Event()

    def readable(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:  # (stdin broke: the transport finds out too)
            chunk = b""
        self.read += chunk
        end = chunk.find(b"\n")
        if end >= 0:
            self.params = _initialize_params(bytes(self.read[: len(self.read) - len(chunk) + end]))
        if not chunk or end >= 0 or len(self.read) > MAX_HELLO:
            self.stop()

    def stop(self) -> None:
        if self.listening:
            self.listening = False
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.fd)
        self.done.set()


_hello: list[_Hello | None] = [None]  # (one stdio client per process)


def listen(grace: float, fd: int = 0) -> None:
    """Read the stdio client's first line from *fd* on the running loop, until serving takes
    stdin over; sessions wait for it at most *grace* seconds. A stdin the loop cannot poll (a
    regular file) is left alone."""
    if not pollable(fd):
        return
    loop = asyncio.get_running_loop()
    hello = _Hello(fd, loop, grace)
    try:
        loop.add_reader(fd, hello.readable)
    except (OSError, ValueError, NotImplementedError):
        return
    _hello[0] = hello


async def client_params() -> dict[str, Any] | None:
    """The stdio client's ``initialize`` params, once its first line has arrived; None when
    nothing listens, the line is something else, or it did not come within the grace."""
    hello = _hello[0]
    if hello is None:
        return None
    if not hello.done.is_set():
        with anyio.move_on_after(max(0.0, hello.deadline - hello.loop.time())):
            await hello.done.wait()
    return hello.params


def take() -> bytes:
    """Stop reading stdin here: the bytes read so far, which the stdio transport serves first."""
    hello = _hello[0]
    if hello is None:
        return b""
    hello.stop()
    read, hello.read = bytes(hello.read), bytearray()
    return read


def forget() -> None:
    """Stop listening and drop what was read (the launch ended; tests)."""
    take()
    _hello[0] = None


def _initialize_params(line: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return None
    params = message.get("params")
    return params if isinstance(params, dict) else None


def pollable(fd: int) -> bool:
    """Whether the event loop can wait for *fd* (a pipe or socket; not a regular file)."""
    if not hasattr(select, "epoll"):
        return False
    try:
        with select.epoll() as probe:
            probe.register(fd, select.EPOLLIN)
    except OSError:
        return False
    return True
