"""The client sessions connected to the launcher, so a reload can tell each one what changed.

fastmcp sends ``list_changed`` notifications only from inside a request; this
middleware remembers every session it sees (weakly: a closed session is dropped).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from typing import Any

from fastmcp.server.middleware import Middleware

log = logging.getLogger("dpt-launch")


class SessionRegistry(Middleware):
    """Remembers the session of every request and notification."""

    def __init__(self) -> None:
        self.sessions: weakref.WeakSet[Any] = weakref.WeakSet()

    async def on_message(self, context: Any, call_next: Any) -> Any:
        ctx = context.fastmcp_context
        if ctx is not None:
            with contextlib.suppress(Exception):  # no session in some transports' contexts
                session = ctx.session
                if session is not None:
                    self.sessions.add(session)
        return await call_next(context)

    async def notify_lists_changed(self) -> int:
        """Tell every known session that tools, prompts and resources changed; returns how many."""
        told = 0
        for session in list(self.sessions):
            try:
                await session.send_tool_list_changed()
                await session.send_prompt_list_changed()
                await session.send_resource_list_changed()
                told += 1
            except Exception as exc:  # a session that closed meanwhile
                log.debug("could not notify a session: %s", exc)
        return told


def registry_of(root: Any) -> SessionRegistry | None:
    return next((m for m in root.middleware if isinstance(m, SessionRegistry)), None)
