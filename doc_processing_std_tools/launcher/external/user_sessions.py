"""Per-user sessions to an OAuth server: each signed-in user's calls go over a session with their
own login (their tokens), opened on their first call; while they have no usable login, a listing
of the server's cached tools whose calls say so. Another user's session never serves them."""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import anyio
from fastmcp import Client
from fastmcp.client.transports import ClientTransport
from fastmcp.exceptions import ToolError

from ..config.schema import ServerEntry
from .oauth import cached_listing, needs_login_line, serving_auth, usable
from .session_transports import is_connection_loss
from .tokens import TokenStore


class ServerOfUsers(Protocol):
    """What the users' sessions need of their server's :class:`.Supervisor`."""

    name: str
    entry: ServerEntry

    @property
    def store(self) -> TokenStore: ...

    def transport(self, auth: Any = None) -> Any: ...

    def describe(self, exc: BaseException) -> str: ...


class UserSession:
    """One signed-in user's own session to an OAuth server (their login, their tokens); or, while
    they have no usable login, a listing of the server's cached tools whose calls say so."""

    def __init__(self, user: str, stamp: str) -> None:
        self.user = user
        self.stamp = stamp  # the user's login as this session read it
        self.client: Client[ClientTransport] | None = None
        self.listing = False
        self.error = ""
        self.ready = anyio.Event()
        self.done = anyio.Event()


class UserSessions:
    """The users' sessions of one :class:`.Supervisor`'s server, in the task group of its run."""

    def __init__(self, supervisor: ServerOfUsers) -> None:
        self._supervisor = supervisor
        self._users: dict[str, UserSession] = {}
        self.tasks: Any = None  # the task group the sessions live in (Supervisor.run())

    async def client(self, user: str) -> Client[ClientTransport]:
        """*user*'s own session (opened on their first call), or their listing while they have no
        usable login."""
        supervisor = self._supervisor
        stamp = await anyio.to_thread.run_sync(supervisor.store.stamp, supervisor.name, user)
        session = self._users.get(user)
        if session is not None and session.stamp != stamp and session.ready.is_set():
            session.done.set()  # a new login (or a logout): open again
            session = None
        if session is None:
            if self.tasks is None:
                raise ToolError(f"server {supervisor.name!r} is not connected")
            session = self._users[user] = UserSession(user, stamp)
            self.tasks.start_soon(self._serve, session)
        await session.ready.wait()
        if session.client is None:
            raise ToolError(session.error or f"server {supervisor.name!r} is not connected")
        return session.client

    def call_failed(self, user: str, exc: BaseException) -> str | None:
        """A user's call failed: when their login was refused or their session is gone, close it
        (the next call opens a new one) and say so."""
        session = self._users.get(user)
        if session is None:
            return None
        if session.error:  # (set when the refresh was refused: the login's line)
            session.done.set()
            return session.error
        if not is_connection_loss(exc):
            return None
        session.done.set()
        name = self._supervisor.name
        return f"server {name!r}: the session of user {user!r} closed; the next call reopens it"

    async def _serve(self, session: UserSession) -> None:
        """Keep *session* open until it is done (a new login, a refused refresh, a lost
        connection, or the supervisor ends)."""
        supervisor = self._supervisor
        name, entry, user = supervisor.name, supervisor.entry, session.user
        store = supervisor.store

        def refused() -> None:
            session.error = needs_login_line(name, user)
            session.done.set()

        def kept(stamp: str) -> None:  # (a refresh of ours is no new login: the session stays)
            session.stamp = stamp

        try:
            record = await anyio.to_thread.run_sync(store.get, name, user)
            if usable(record, entry.url or ""):
                auth = serving_auth(name, entry, store, user, on_needs_login=refused, on_saved=kept)
                transport = supervisor.transport(auth)
            else:
                tools = await anyio.to_thread.run_sync(store.load_tools, name)
                transport = cached_listing(name, tools, needs_login_line(name, user))
                session.listing = True
            client = Client(transport)
            with anyio.fail_after(entry.start_timeout):
                await client.__aenter__()
            try:
                session.client = client
                session.ready.set()
                await session.done.wait()
            finally:
                session.client = None
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await client.__aexit__(None, None, None)
        except Exception as exc:
            session.error = session.error or (
                f"server {name!r} (user {user!r}): {supervisor.describe(exc)[:300]}"
            )
        finally:
            session.ready.set()
            if self._users.get(user) is session:
                del self._users[user]
