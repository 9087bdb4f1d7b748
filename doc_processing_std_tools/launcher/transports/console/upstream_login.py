"""The "Log in" button of an OAuth ``url:`` server: ``dpt-launch login NAME`` run by the daemon,
with the browser sent back to a route of the daemon (``/ui/login/callback``) instead of a
loopback port of the machine that ran the command.

The flow is :func:`...external.oauth.login_flow` (the mcp SDK's authorization-code flow: PKCE,
``state`` checked by the SDK, RFC 8707 ``resource``); its tokens go to the token store
``dpt-launch login`` writes, where the server's supervisor finds them (no restart). A login is
pending from the button until its callback arrives or :data:`CALLBACK_TIMEOUT` passes; the
callback is matched by the ``state`` the authorization URL carried, and used once. It cannot rely
on the console's cookie: a browser does not send a SameSite=Strict cookie on the way back from
another site.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
from mcp.shared.auth import AuthorizationCodeResult

from ...errors import LauncherError
from ...external.oauth import CALLBACK_TIMEOUT, login_flow
from ...external.tokens import TokenStore
from ...reasons import error_reason

log = logging.getLogger("dpt-launch")
START_TIMEOUT = 30.0  # seconds discovery and registration may take before the browser leaves


class LoginRefused(LauncherError):
    """Why a login could not start, in one line."""


@dataclass
class Pending:
    """One login between the button and its callback."""

    name: str
    url: str = ""
    # set once its URL is shown or it ended, whichever comes first: what the button waits for
    settled: anyio.Event = field(default_factory=anyio.Event)
    answer: AuthorizationCodeResult | None = None
    answered: anyio.Event = field(default_factory=anyio.Event)
    outcome: str = ""
    failed: bool = False
    done: anyio.Event = field(default_factory=anyio.Event)


class Logins:
    """The logins the console runs, over *entries* (the configured servers by name)."""

    def __init__(
        self,
        entries: Callable[[], Mapping[str, Any]],
        store: Callable[[], TokenStore] = TokenStore,
    ) -> None:
        self.entries, self.store = entries, store
        self._pending: dict[str, Pending] = {}  # by the OAuth state of its authorization URL
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: dict[str, asyncio.Task[None]] = {}  # one login per server: the latest

    def cancel(self) -> None:
        """Stop every login still waiting for its browser (the daemon is stopping)."""
        for task in list(self._tasks):
            task.cancel()

    def servers(self) -> frozenset[str]:
        """The servers whose login the console can run: ``url:`` ones with ``auth: oauth``."""
        return frozenset(n for n, e in self.entries().items() if e.url and e.auth is not None)

    async def start(self, name: str, redirect: str) -> str:
        """Begin the login of *name*: the authorization URL to send the browser to."""
        entry = self.entries().get(name)
        if entry is None or name not in self.servers():
            raise LoginRefused(f"no OAuth server {name!r} in the config")
        previous = self._running.pop(name, None)
        if previous is not None:  # (pressed again: the earlier login's URL no longer answers)
            previous.cancel()
        pending = Pending(name)
        task = asyncio.get_running_loop().create_task(self._run(pending, entry, redirect))
        self._tasks.add(task)
        self._running[name] = task
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda done: self._ended(name, done))
        with anyio.move_on_after(START_TIMEOUT):
            await pending.settled.wait()
        if pending.url and not pending.done.is_set():
            return pending.url
        task.cancel()
        raise LoginRefused(pending.outcome or f"{name}: the authorization server did not answer")

    def _ended(self, name: str, task: asyncio.Task[None]) -> None:
        if self._running.get(name) is task:
            del self._running[name]

    async def _run(self, pending: Pending, entry: Any, redirect: str) -> None:
        state = ""

        async def show_url(url: str) -> None:
            nonlocal state
            parts = urlsplit(url)
            if parts.scheme not in ("https", "http"):  # (the page links to it)
                raise LoginRefused(f"the authorization URL is not http(s): {parts.scheme}:")
            state = (parse_qs(parts.query).get("state") or [""])[0]
            if not state:
                raise LoginRefused("the authorization URL carries no state")
            self._pending[state] = pending
            pending.url = url
            pending.settled.set()

        async def callback() -> AuthorizationCodeResult:
            with anyio.fail_after(CALLBACK_TIMEOUT):
                await pending.answered.wait()
            assert pending.answer is not None
            return pending.answer

        try:
            tools = await login_flow(
                pending.name,
                entry,
                self.store(),
                redirect=redirect,
                show_url=show_url,
                callback=callback,
            )
            pending.outcome = f"logged in to {pending.name!r}: {len(tools)} tools"
            log.warning("console: %s", pending.outcome)
        except Exception as exc:
            pending.failed = True
            pending.outcome = f"login to {pending.name!r} failed: {error_reason(exc)[:300]}"
            log.warning("console: %s", pending.outcome)
        finally:
            self._pending.pop(state, None)
            pending.done.set()
            pending.settled.set()

    async def finish(self, query: Mapping[str, str]) -> tuple[str, bool]:
        """The callback's *query* (``code`` and ``state``, or ``error``) handed to the login it
        belongs to; returns the login's outcome and whether it failed."""
        state = query.get("state", "")
        pending = self._pending.pop(state, None) if state else None
        if pending is None or pending.answered.is_set():
            return "no login is waiting for this answer (it expired or was used)", True
        error = query.get("error")
        if error:
            pending.failed = True
            pending.answer = AuthorizationCodeResult(code="", state=state)
            pending.answered.set()
            await pending.done.wait()
            why = query.get("error_description") or error
            return f"login to {pending.name!r} refused by the authorization server: {why}", True
        pending.answer = AuthorizationCodeResult(
            code=query.get("code", ""), state=state, iss=query.get("iss")
        )
        pending.answered.set()
        with anyio.move_on_after(CALLBACK_TIMEOUT):
            await pending.done.wait()
        return pending.outcome or f"login to {pending.name!r} still running", pending.failed
