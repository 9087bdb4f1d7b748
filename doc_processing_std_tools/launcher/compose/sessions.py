"""The client sessions connected to the launcher, so a reload can tell each one what changed.

fastmcp sends ``list_changed`` notifications only from inside a request. The one
middleware on the composed root remembers every session that completes its
handshake (at most ``MAX_REMEMBERED``; one that fails to take a notification is
forgotten) and, being the served server,
also keeps the per-session cache of the client's MCP roots (``roots_watch.RootsWatch``).
One middleware rather than two: each one costs every call a little.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...seams.server_sessions import session_connection
from ...shared.roots_watch import RootsWatch
from ...shared.workspace import client_roots
from ..external.client_requests import Fronts
from ..transports.session_binding import PROFILE_SCOPE_KEY
from .profile_gate import gate_of

log = logging.getLogger("dpt-launch")

MAX_REMEMBERED = 10_000  # as many as the HTTP transport keeps alive by default


class SessionRegistry(RootsWatch):
    """Remembers each session on ``notifications/initialized``; keeps the roots cache fresh."""

    def __init__(self) -> None:
        super().__init__()
        # keyed by the session's connection: the session object itself may be a per-request view
        self.sessions: OrderedDict[int, Any] = OrderedDict()
        # what external servers ask of the client goes to these sessions
        self.fronts = Fronts()
        # which servers a client may hear of outside any call (set once the composition is built)
        self.audience: Audience | None = None

    async def on_notification(self, context: Any, call_next: Any) -> Any:
        if getattr(context, "method", None) == "notifications/initialized":
            ctx = context.fastmcp_context
            session = None
            if ctx is not None:
                with contextlib.suppress(RuntimeError):  # fastmcp: no session established
                    session = ctx.session
            if session is not None:
                self.sessions[id(session_connection(session))] = session
                while len(self.sessions) > MAX_REMEMBERED:
                    self.sessions.popitem(last=False)
                stdio = ctx.transport == "stdio"
                told = None if stdio or self.audience is None else self.audience.of(ctx, session)
                await self.fronts.client_ready(session, stdio=stdio, told=told)
        elif getattr(context, "method", None) == "notifications/roots/list_changed":
            await self.fronts.roots_changed(self._session_of(context))
        return await super().on_notification(context, call_next)

    async def on_request(self, context: Any, call_next: Any) -> Any:
        """A client's ``logging/setLevel`` also reaches the external servers' sessions of its
        own (``sessions: per_client``), which then filter their log messages themselves."""
        result = await call_next(context)
        if getattr(context, "method", None) == "logging/setLevel":
            message = context.message  # (the raw params: this method has no typed pass)
            level = message.get("level") if isinstance(message, dict) else None
            session = self._session_of(context)
            if isinstance(level, str) and session is not None:
                request_id = None
                with contextlib.suppress(Exception):  # (its messages then go out unrelated)
                    request_id = context.fastmcp_context.request_id
                await self.fronts.set_level(session, level, request_id)
        return result

    @staticmethod
    def _session_of(context: Any) -> Any:
        ctx = context.fastmcp_context
        if ctx is None:
            return None
        with contextlib.suppress(RuntimeError):  # fastmcp: no session established
            return ctx.session
        return None

    async def on_list_tools(self, context: Any, call_next: Any) -> Any:
        """Ask a client that declares roots for them now, in this small reply's stream.

        Over HTTP a call whose stream carried a request to the client must answer as
        SSE, which the official client caps at 1 MiB per event; with the roots already
        cached, a session's first big ``read_text_file`` goes out as one JSON body.
        """
        ctx = context.fastmcp_context
        if ctx is not None and ctx.transport != "stdio":  # (stdio has no such cap: asked later)
            with contextlib.suppress(Exception):  # a client that does not answer: asked later
                await client_roots(ctx)
        return await call_next(context)

    async def notify_lists_changed(
        self, kinds: Sequence[str] = ("tools", "prompts", "resources")
    ) -> int:
        """Tell every known session that these lists changed; returns how many."""
        told = 0
        for key, session in list(self.sessions.items()):
            try:
                if "tools" in kinds:
                    await session.send_tool_list_changed()
                if "prompts" in kinds:
                    await session.send_prompt_list_changed()
                if "resources" in kinds:
                    await session.send_resource_list_changed()
                told += 1
            except Exception as exc:  # a session that closed meanwhile
                log.debug("could not notify a session: %s", exc)
                self.sessions.pop(key, None)
        return told


class Audience:
    """Which servers an HTTP client may hear of outside any call (a shared session's log
    message names its server): those its ``access:`` rules let it use whole, and that its
    endpoint's profile shows. Its caller and profile are taken at its handshake (the
    session is bound to both); the rules and the profile's names are read when a message
    comes."""

    def __init__(self, composition: Any) -> None:
        self.composition = composition

    def of(self, ctx: Any, session: Any) -> Callable[[str], bool]:
        """The judgment for the client of *session*, whose handshake fastmcp's *ctx* serves."""
        request = getattr(getattr(ctx, "request_context", None), "request", None)
        scope = getattr(request, "scope", None)
        profile = scope.get(PROFILE_SCOPE_KEY) if isinstance(scope, Mapping) else None
        guards = self.composition.guards
        caller = None
        if guards is not None:
            caller = guards.caller(session, getattr(request, "headers", None) or {})
        composition = self.composition

        def told(server: str) -> bool:
            guards = composition.guards
            access = guards.access if guards is not None else None
            if (
                access is not None
                and caller is not None
                and not access.allows_server(caller, server)
            ):
                return False
            gate = gate_of(composition.root)
            return gate is None or gate.shows_server(profile, server)

        return told


def registry_of(root: Any) -> SessionRegistry | None:
    return next((m for m in root.middleware if isinstance(m, SessionRegistry)), None)
