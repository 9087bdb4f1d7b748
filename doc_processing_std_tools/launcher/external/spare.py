"""One spare child of a ``command:`` server with sessions per client, when serving HTTP.

Each new HTTP client session gets a child of its own (:mod:`.per_client`), so its first
``tools/list`` would wait for the command to start (for Node: about a second). A :class:`Spare`
keeps one process started ahead and not initialized: the client's own session takes it (its
``initialize`` carries the client's own params, as before) and another is started after that
session opened. A spare that died is dropped; the session then starts its own, as without one.
Spares count toward no bound of the pool; they are stopped and reaped with their supervisor.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, TextIO

import anyio

from ..config.schema import ServerEntry
from .child_process import spawn_child
from .child_start import command_line, stop_process

log = logging.getLogger("dpt-launch")


class Spare:
    """The spare process of one server (or none), refilled in the background."""

    def __init__(self, name: str, entry: ServerEntry, base_dir: Path, errlog: TextIO) -> None:
        self.name, self.entry, self.base_dir, self.errlog = name, entry, base_dir, errlog
        self.process: Any = None
        self.spawned = 0  # processes started as spares (tests count them)
        self._filling = False
        self._closed = False

    def take(self, tasks: Any) -> Any:
        """The spare process if it is still running (then it is no longer the spare), else None."""
        process, self.process = self.process, None
        if process is not None and process.returncode is not None:
            tasks.start_soon(stop_process, process)  # (its pipes closed, reaped)
            return None
        return process

    def refill(self, tasks: Any) -> None:
        """Start a new spare in *tasks* unless there is one (or one is starting)."""
        if self.process is None and not self._filling and not self._closed:
            self._filling = True
            tasks.start_soon(self._fill)

    async def _fill(self) -> None:
        try:
            command, args, cwd = command_line(self.entry, self.base_dir)
            env = {**os.environ, **self.entry.env}
            process = await spawn_child(command, args, env, cwd, self.errlog)
        except Exception as exc:  # (the next session starts its own, and says why if it fails)
            log.debug("servers.%s: no spare process: %s", self.name, exc)
            return
        finally:
            self._filling = False
        self.spawned += 1
        if self._closed:
            with anyio.CancelScope(shield=True):
                await stop_process(process)
            return
        self.process = process

    async def close(self) -> None:
        """Stop and reap the spare; none is started after this."""
        self._closed = True
        process, self.process = self.process, None
        if process is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await stop_process(process)
