"""An external command as a fastmcp client transport: started as the SDK's stdio client would
start it, its stdin and stdout a :class:`.ChildPipe`, and stopped with whatever it left in its
process group."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any, TextIO

import anyio
from fastmcp.client.transports.base import ClientTransport, TransportOptions
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from ...seams.stdio_children import spawn_stdio_child, stop_stdio_child
from .child_pipe import ChildPipe

EXIT_POLL = 0.5  # seconds between looks at whether the command exited
LEFTOVER_GRACE = 1.0  # seconds what the command left in its group has after SIGTERM


@asynccontextmanager
async def open_child(
    command: str,
    args: list[str],
    env: dict[str, str],
    cwd: str | None,
    errlog: TextIO,
    max_line: int | None = None,
    name: str = "",
    process: Any = None,
) -> AsyncIterator[tuple[ChildPipe, Any, Any]]:
    """Start *command* as the SDK's stdio client would (or take *process*, started so already);
    yields (pipe, read, write) for a session.

    Leaving stops it as the SDK does: stdin closed, then its process group
    terminated, then killed.
    """
    if process is None:
        process = await spawn_stdio_child(
            command, args, get_default_environment() | env, errlog, cwd
        )
    pipe = ChildPipe(process, max_line, name)
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.create_task_group() as group:
        group.start_soon(pipe.read, read_send)
        group.start_soon(pipe.write_session_messages, write_receive)
        group.start_soon(_close_when_exited, process)
        try:
            yield pipe, read_receive, write_send
        finally:
            with anyio.CancelScope(shield=True):
                write_send.close()
                read_receive.close()
                await stop_stdio_child(process)
                await _end_leftovers(process.pid)
            group.cancel_scope.cancel()


async def _close_when_exited(process: Any) -> None:
    """End the session when the command exits, even if something it started keeps its stdout
    open (a helper in the background): otherwise only a ping timing out would tell."""
    while process.returncode is None:
        await anyio.sleep(EXIT_POLL)
    await anyio.sleep(EXIT_POLL)  # its last lines are read first
    with suppress(Exception):
        await process.stdout.aclose()


async def _end_leftovers(group_id: int) -> None:
    """What the command left in its process group (the SDK ends the group only when the command
    itself outlives its grace): SIGTERM, then SIGKILL."""
    if not hasattr(os, "killpg"):
        return
    for signum, wait in ((signal.SIGTERM, LEFTOVER_GRACE), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(group_id, signum)
        except OSError:
            return  # no process left in the group
        deadline = anyio.current_time() + wait
        while anyio.current_time() < deadline:
            await anyio.sleep(0.05)
            try:
                os.killpg(group_id, 0)
            except OSError:
                return


class ChildTransport(ClientTransport):
    """A fastmcp client transport running a command over a :class:`.ChildPipe` (``.pipe`` while
    up)."""

    legacy_only = True

    def __init__(
        self,
        command: str,
        args: list[str],
        env: dict[str, str],
        cwd: str | None,
        errlog: TextIO,
        max_line: int | None = None,
        name: str = "",
        process: Any = None,
    ) -> None:
        """*process*: the command started already (:mod:`.child_start`), for the first session."""
        self.command, self.args, self.env, self.cwd = command, args, env, cwd
        self.errlog, self.max_line, self.name = errlog, max_line, name
        self.pipe: ChildPipe | None = None
        self._process = process

    @asynccontextmanager
    async def connect_session(
        self, *, transport_options: TransportOptions | None = None, **session_kwargs: Any
    ) -> AsyncIterator[Any]:
        options = transport_options or TransportOptions()
        process, self._process = self._process, None
        started = open_child(
            self.command,
            self.args,
            self.env,
            self.cwd,
            self.errlog,
            self.max_line,
            self.name,
            process,
        )
        async with (
            started as (pipe, read, write),
            options.session_class(read, write, **session_kwargs) as session,
        ):
            self.pipe = pipe
            try:
                yield session
            finally:
                self.pipe = None

    def __repr__(self) -> str:
        return f"<ChildTransport {self.command!r}>"
