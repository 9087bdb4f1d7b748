"""The upstream sessions of one external server beyond the launcher's own, keyed by who they serve:
a client session (``sessions: per_client``) or a signed-in user (``per_user``, and every OAuth
server: each user's calls go over a session with their own login).

The pool is bounded (``servers.NAME.max_sessions``): a new session when it is full closes the
least recently used one with no request in flight, and is refused with a line naming the setting
when every one is busy. A session unused for ``session_idle_timeout`` seconds is closed; one
whose client left (HTTP DELETE, expiry, disconnect: the connection's teardown) at once. Closing
a ``command:`` server's session stops its child and reaps it (:mod:`.child_process`).

Serving HTTP, a ``per_client`` command's pool holds one child started with the launcher
(:func:`.child_start.claim_first`): the first client session's own takes it (:meth:`take_early`)
instead of waiting for the command to start. There is no other spare; one never taken is
stopped after ``session_idle_timeout`` (:meth:`expire_early`) and counted.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
from fastmcp import Client
from fastmcp.client.transports import ClientTransport
from fastmcp.exceptions import ToolError

from ...seams.client_sessions import requests_in_flight
from ...seams.fastmcp_server import outside_requests
from ..config.schema import ServerEntry
from .child_start import stop_process
from .oauth import cached_listing, needs_login_line, serving_auth, usable
from .session_transports import is_connection_loss, pass_notifications
from .tokens import TokenStore

log = logging.getLogger("dpt-launch")

WATCH_INTERVAL = 2.0  # seconds between looks at whether a pooled session's connection is gone
# Opens a session's client (not yet entered: the pool enters it within start_timeout).
Opener = Callable[["PooledSession"], Awaitable[Client[ClientTransport]]]


class PoolOwner(Protocol):
    """What the pool needs of its server's :class:`.Supervisor`."""

    name: str
    entry: ServerEntry

    @property
    def store(self) -> TokenStore: ...

    def transport(self, auth: Any = None) -> Any: ...

    def describe(self, exc: BaseException) -> str: ...


class PooledSession:
    """One upstream session of the pool: its client once open, or why it could not open."""

    def __init__(self, key: str, stamp: str, what: str) -> None:
        self.key = key
        self.what = what  # whom it serves, in messages: "user 'ann'", "a client session"
        self.stamp = stamp  # what it was opened for (a user's login as read then)
        self.client: Client[ClientTransport] | None = None
        self.link: Any = None  # a client session's own FrontLink (per_client)
        self.transport: Any = None  # its transport, when the opener keeps it (a command's pipe)
        self.listing = False
        self.error = ""
        self.ready = anyio.Event()
        self.done = anyio.Event()
        self.last_used = anyio.current_time()

    def busy(self) -> bool:
        """A request in flight, or a subscription its client holds: neither idle nor evicted."""
        client = self.client
        if client is None:
            return False
        return requests_in_flight(client) > 0 or (
            self.link is not None and self.link.has_subscribers()
        )


class SessionPool:
    """The pooled sessions of one :class:`.Supervisor`'s server, in the task group of its run."""

    def __init__(self, supervisor: PoolOwner) -> None:
        self._supervisor = supervisor
        self._sessions: OrderedDict[str, PooledSession] = OrderedDict()  # least recent first
        self.tasks: Any = None  # the task group the sessions live in (Supervisor.run())
        self.opened = 0  # sessions opened in all (tests count them)
        # the child started with the launcher for the first client's session, until taken
        self.early: Any = None
        self.early_taken = 0  # early children a client's session took (0 or 1)
        self.early_unused = 0  # early children stopped unused (no client within the timeout)

    @property
    def open(self) -> int:
        return len(self._sessions)

    def early_counts(self) -> tuple[int, int, int]:
        """(early children waiting now, taken by a client's session, stopped unused)."""
        return int(self.early is not None), self.early_taken, self.early_unused

    def take_early(self) -> Any:
        """The early child if it still runs (then it is a client's), else None (one that exited
        is reaped in the background: the session starts its own)."""
        process, self.early = self.early, None
        if process is None:
            return None
        if process.returncode is not None:
            self.early_unused += 1
            if self.tasks is not None:
                self.tasks.start_soon(stop_process, process)
            return None
        self.early_taken += 1
        return process

    async def expire_early(self) -> None:
        """Stop the early child once ``session_idle_timeout`` passed with no client to take it."""
        await anyio.sleep(self._supervisor.entry.session_idle_timeout)
        if self.early is not None:
            log.debug(
                "servers.%s: no client came within session_idle_timeout: stopped the child "
                "started for the first one",
                self._supervisor.name,
            )
            await self.drop_early()

    async def drop_early(self) -> None:
        """Stop and reap the early child, if it was not taken (counted as unused)."""
        process, self.early = self.early, None
        if process is not None:
            self.early_unused += 1
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await stop_process(process)

    def get(self, key: str) -> PooledSession | None:
        return self._sessions.get(key)

    async def session(
        self, key: str, opener: Opener, *, what: str, stamp: str = ""
    ) -> PooledSession:
        """The session for *key*, opened with *opener* when there is none (or it was opened for
        another *stamp*); it raises ToolError with the reason it could not open."""
        session = self._sessions.get(key)
        if session is not None and session.stamp != stamp and session.ready.is_set():
            session.done.set()  # (a new login, or a logout: open again)
            session = None
        if session is None:
            supervisor = self._supervisor
            if self.tasks is None:
                raise ToolError(f"server {supervisor.name!r} is not connected")
            self._make_room()
            session = self._sessions[key] = PooledSession(key, stamp, what)
            self.opened += 1
            self.tasks.start_soon(self._serve, session, opener)
        session.last_used = anyio.current_time()
        self._sessions.move_to_end(key)
        await session.ready.wait()
        if session.client is None:
            raise ToolError(session.error or f"server {self._supervisor.name!r} is not connected")
        return session

    def _make_room(self) -> None:
        """At the bound, close the least recently used session with nothing in flight, or say
        which setting to raise."""
        entry, name = self._supervisor.entry, self._supervisor.name
        if len(self._sessions) < entry.max_sessions:
            return
        for session in self._sessions.values():
            if session.ready.is_set() and not session.busy():
                log.info(
                    "servers.%s: %d sessions open (servers.%s.max_sessions): closed the least "
                    "recently used one, of %s",
                    name,
                    len(self._sessions),
                    name,
                    session.what,
                )
                self._forget(session)
                return
        raise ToolError(
            f"server {name!r} has {len(self._sessions)} upstream sessions open, each busy; raise "
            f"servers.{name}.max_sessions (now {entry.max_sessions}) or wait for a client to leave"
        )

    def close(self, key: str) -> None:
        """Close *key*'s session (its client left): its child is stopped and reaped."""
        session = self._sessions.get(key)
        if session is not None:
            self._forget(session)

    def _forget(self, session: PooledSession) -> None:
        session.done.set()
        if self._sessions.get(session.key) is session:
            del self._sessions[session.key]

    def call_failed(self, key: str, exc: BaseException) -> str | None:
        """A call on *key*'s session failed: when its connection is gone, close it (the next
        call opens a new one) and say so."""
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.error:  # (set when a login's refresh was refused: the login's line)
            self._forget(session)
            return session.error
        if not is_connection_loss(exc):
            return None
        self._forget(session)
        name = self._supervisor.name
        return f"server {name!r}: the session of {session.what} closed; the next call reopens it"

    async def _serve(self, session: PooledSession, opener: Opener) -> None:
        """Keep *session* open until it is done (its client left, a new login, a lost
        connection, idle too long, or the supervisor ends)."""
        supervisor = self._supervisor
        idle = supervisor.entry.session_idle_timeout
        with outside_requests():
            await self._keep(session, opener, idle)

    async def _keep(self, session: PooledSession, opener: Opener, idle: float) -> None:
        supervisor = self._supervisor
        try:
            client = await opener(session)
            with anyio.fail_after(supervisor.entry.start_timeout):
                await client.__aenter__()
            try:
                session.client = client
                if session.link is not None:
                    # What the server sent as it set the session up (server-everything: a
                    # tools/list_changed per tool it adds for the client's capabilities) is
                    # what the client's first list shows: a ping's answer comes after it.
                    await client.ping()
                    session.link.settled = True
                    # (its custom notifications: to its client too)
                    pass_notifications(session.transport, session.link.notify)
                    session.link.client = client
                session.last_used = anyio.current_time()  # (idle from now, not from the ask)
                session.ready.set()
                while not session.done.is_set():
                    if not client.is_connected():
                        break
                    left = session.last_used + idle - anyio.current_time()
                    if left <= 0 and not session.busy():
                        log.debug(
                            "servers.%s: closed the idle session of %s",
                            supervisor.name,
                            session.what,
                        )
                        break
                    with anyio.move_on_after(min(max(left, 0.1), WATCH_INTERVAL)):
                        await session.done.wait()
                self._forget(session)  # (out of the count while it closes)
            finally:
                session.client = None
                if session.link is not None:
                    session.link.client = None
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await client.__aexit__(None, None, None)
        except Exception as exc:
            session.error = session.error or (
                f"server {supervisor.name!r} ({session.what}): {supervisor.describe(exc)[:300]}"
            )
        finally:
            session.ready.set()
            if self._sessions.get(session.key) is session:
                del self._sessions[session.key]


async def user_session(pool: SessionPool, supervisor: PoolOwner, user: str) -> PooledSession:
    """*user*'s own session (opened on their first call): to an OAuth server with their login,
    or their listing of the server's cached tools, whose calls say a login is needed, while they
    have no usable login."""
    name, entry = supervisor.name, supervisor.entry
    key, what = f"user:{user}", f"user {user!r}"
    if entry.auth is None:  # (sessions: per_user without a login of its own)

        async def plain(session: PooledSession) -> Client[ClientTransport]:
            return Client(supervisor.transport(), mode="legacy")

        return await pool.session(key, plain, what=what)
    store = supervisor.store
    stamp = await anyio.to_thread.run_sync(store.stamp, name, user)

    async def opener(session: PooledSession) -> Client[ClientTransport]:
        def refused() -> None:
            session.error = needs_login_line(name, user)
            session.done.set()

        def kept(stamp: str) -> None:  # (a refresh of ours is no new login: the session stays)
            session.stamp = stamp

        record = await anyio.to_thread.run_sync(store.get, name, user)
        if usable(record, entry.url or ""):
            auth = serving_auth(name, entry, store, user, on_needs_login=refused, on_saved=kept)
            return Client(supervisor.transport(auth))
        tools = await anyio.to_thread.run_sync(store.load_tools, name)
        session.listing = True
        return Client(cached_listing(name, tools, needs_login_line(name, user)))

    return await pool.session(key, opener, what=what, stamp=stamp)
