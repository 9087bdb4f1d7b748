"""A command's process before its session: its stderr relayed line by line, and the early start.

The launcher's imports for serving and for client sessions (fastmcp, the mcp SDK) take about as
long as a Node or Python server takes to start (``python -X importtime``: 0.8-1 s). So
:func:`start_commands` starts every external command first, as the SDK's stdio client would,
and the imports run while the children boot; a :class:`.Supervisor` then claims its child
(:func:`claim`) for its first session instead of starting one.

Serving HTTP, a ``sessions: per_client`` command gets a second child at the same moment, for
the first client's own session (:func:`claim_first`): without it that client's first list waits
for the command to start once more after the launcher is up. It is not initialized: the
client's own session sends ``initialize`` with the client's params. This module imports neither.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, TextIO

import anyio

from ..config.schema import LoadedConfig, ServerEntry
from .child import wrapped_command

MAX_STDERR_LINE = 8 * 1024  # bytes of one stderr line of a child passed on


class StderrRelay:
    """A pipe whose lines are copied to our stderr as ``[name] line`` by a daemon thread."""

    def __init__(self, name: str) -> None:
        read_fd, write_fd = os.pipe()
        self.file: TextIO = os.fdopen(write_fd, "w")
        self.last_line = ""
        threading.Thread(
            target=self._pump, args=(name, read_fd), name=f"stderr of {name}", daemon=True
        ).start()

    def _pump(self, name: str, read_fd: int) -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            cut = False  # the rest of a line longer than MAX_STDERR_LINE is dropped
            while raw := pipe.readline(MAX_STDERR_LINE):
                whole = raw.endswith(b"\n")
                if not cut:
                    line = raw.decode("utf-8", "replace").rstrip()
                    if line:
                        self.last_line = line[:300]
                        more = "" if whole else " [line cut at 8 KB]"
                        print(f"[{name}] {line}{more}", file=sys.stderr, flush=True)
                cut = not whole

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()


@dataclass
class Started:
    """A command started early: its process, for the first session, and its stderr relay."""

    process: Any  # an anyio Process, as the SDK's stdio client makes it
    relay: StderrRelay


_started: dict[str, Started] = {}
_first_clients: dict[str, Any] = {}  # mount name -> the process for the first client's session


def command_line(entry: ServerEntry, base_dir: Any) -> tuple[str, list[str], str | None]:
    """What runs *entry*'s command: through the shim (:mod:`.child`), and in which folder."""
    assert entry.command
    command, args = wrapped_command(entry.command, list(entry.args))
    cwd = str((base_dir / entry.cwd).resolve()) if entry.cwd else None
    return command, args, cwd


async def start_commands(loaded: LoadedConfig, first_clients: bool = False) -> None:
    """Start each enabled ``command:`` server now, as the SDK's stdio client would start it (its
    own session and process group). One that cannot start is left to its supervisor, which
    starts it again and says why. With *first_clients* (serving HTTP), a ``per_client`` one is
    started twice: the second is the first client's (:func:`claim_first`)."""
    if sys.platform == "win32":  # (the SDK starts children in a Job Object there)
        return
    for name, entry in loaded.config.servers.items():
        if not entry.enabled or not entry.command:
            continue
        command, args, cwd = command_line(entry, loaded.base_dir)
        if cwd is not None and not os.path.isdir(cwd):
            continue
        relay = StderrRelay(name)
        try:
            process = await _spawn([command, *args], entry, relay, cwd)
        except OSError:
            relay.close()
            continue
        _started[name] = Started(process, relay)
        if first_clients and entry.session_mode == "per_client":
            with contextlib.suppress(OSError):  # (the first client's session starts its own)
                _first_clients[name] = await _spawn([command, *args], entry, relay, cwd)


async def _spawn(argv: list[str], entry: ServerEntry, relay: StderrRelay, cwd: str | None) -> Any:
    return await anyio.open_process(
        argv, env={**os.environ, **entry.env}, stderr=relay.file, cwd=cwd, start_new_session=True
    )


def claim(name: str) -> Started | None:
    """The command started early for mount *name*, taken (once), or None."""
    return _started.pop(name, None)


def claim_first(name: str) -> Any:
    """The process started early for mount *name*'s first client session, taken (once), or
    None. Its stderr goes to the relay of :func:`claim`'s."""
    return _first_clients.pop(name, None)


async def stop_unclaimed() -> None:
    """Stop what no supervisor claimed (the launch ended before its servers were built)."""
    unclaimed = list(_started.values())
    firsts = list(_first_clients.values())
    _started.clear()
    _first_clients.clear()
    for process in firsts:
        await stop_process(process)
    for started in unclaimed:
        await stop_process(started.process)
        started.relay.close()


async def stop_process(process: Any) -> None:
    """Stop a process started early and never given a session, with its process group:
    SIGTERM, up to 2 s, SIGKILL; it is reaped."""
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGTERM)
    with anyio.move_on_after(2), contextlib.suppress(Exception):
        await process.aclose()
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    with anyio.move_on_after(1), contextlib.suppress(Exception):
        await process.wait()
