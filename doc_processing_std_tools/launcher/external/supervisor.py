"""External MCP servers (a ``command`` or a ``url``), proxied with one long-lived session each.

Each server has a :class:`Supervisor`: a task that opens the session, keeps it for
every call (never a process or an HTTP session per request), notices when it
dies, and opens it again with exponential backoff (1 s doubling to 30 s). While
it is down, the server's tools stay listed and calls to them return an error
saying so. How the session is reached: :mod:`.session_transports`. Beside it, the sessions
of single clients (``sessions: per_client``: :mod:`.per_client`) or users (``per_user``, and
every OAuth server) are in its :class:`.session_pool.SessionPool`; over the launcher's stdio
there is one client, and its session is the supervisor's own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable
from contextlib import nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import anyio
from fastmcp import Client, FastMCP
from fastmcp.client.transports import ClientTransport
from fastmcp.exceptions import ToolError
from fastmcp.server.providers.proxy import FastMCPProxy

from ...seams.client_sessions import answer_server_requests, requests_in_flight, send_raw_request
from ...seams.fastmcp_server import client_log_level, request_sources
from ...seams.server_sessions import session_connection
from ..config.schema import ServerEntry
from ..reasons import error_reason
from . import child_start, client_hello
from .child_pipe import ChildPipe
from .child_start import StderrRelay
from .client_requests import FrontLink, Fronts
from .oauth import cached_listing, needs_login_line, serving_auth, usable
from .per_client import OwnFront, client_key, lasting, own_client, stdio_client
from .session_pool import PooledSession, SessionPool, user_session
from .session_transports import (
    HTTP_HINTS,
    HttpStatusNote,
    is_connection_loss,
    pass_notifications,
    session_transport,
)
from .tokens import TokenStore
from .wording import ExternalStartError, shown_url

log = logging.getLogger("dpt-launch")

FIRST_BACKOFF, MAX_BACKOFF = 1.0, 30.0
PING_INTERVAL = 2.0  # a live session is pinged this often (a dead child fails at once)

# why a session ended when nothing says more (no error, no stderr line): the same words whether
# a call or the supervisor's ping saw it first, so a call's answer does not depend on which did
SESSION_CLOSED = "the session closed"
LOGIN_POLL = 1.0  # seconds between looks for a new login while a server needs one
WANTS_OAUTH = (
    "HTTP 401: the server wants an OAuth login; add 'auth: oauth' under servers.{name} in the "
    "config, then run dpt-launch login {name}"
)

# the supervisor and pool key of the client's own session serving the current call, if any
SERVED_BY: ContextVar[tuple[Supervisor, str] | None] = ContextVar("dpt_served_by", default=None)

SHARED_LINE = (
    "shared: every client shares one session: its roots (the last client asked), its log level "
    "(the launcher filters per client), its subscriptions, the capabilities and clientInfo it "
    "was opened with (every capability; the launcher's name), and any state the server keeps"
)

State = Literal["starting", "up", "restarting", "failed", "needs-login"]
LIST_CHANGED = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    }
)


class Supervisor:
    """Owns one external server's session for the launcher's lifetime."""

    def __init__(
        self, name: str, entry: ServerEntry, base_dir: Path, fronts: Fronts | None = None
    ) -> None:
        """*fronts*: the launcher's client sessions, which the server's own requests and log
        messages reach (:mod:`.client_requests`); without it they reach no client."""
        self.name = name
        self.entry = entry
        self.base_dir = base_dir
        self.state: State = "starting"
        self.attempt = 0
        self.restarts = 0  # sessions started again after one ended (dpt_external_server_restarts)
        self.last_error = ""
        # a command started before the launcher's imports (cli): its first session's process
        self._early = child_start.claim(name) if entry.command else None
        self.relay = (
            (self._early.relay if self._early else StderrRelay(name)) if entry.command else None
        )
        self._client: Client[ClientTransport] | None = None
        self._counted = False
        self._http = HttpStatusNote()  # what a URL server answered last
        self._needs_login = False  # this round found no usable login (entry.auth)
        self._stamp = ""  # the token store's stamp when this round read the login
        self._listing: Client[ClientTransport] | None = (
            None  # the cached tool list, served while needs-login
        )
        self._store: TokenStore | None = None
        # the signed-in user a call serves (an OAuth server's calls then use that user's login)
        self.subject: Callable[[], str | None] = lambda: None
        self.pool = SessionPool(self)  # sessions of one client or user (entry.session_mode)
        if entry.command:  # (serving HTTP, per_client: the first client's, started with ours)
            self.pool.early = child_start.claim_first(name)
        self.pipe: ChildPipe | None = None  # a command's stdin/stdout while up (the fast path)
        self.front = FrontLink(name, fronts or Fronts())
        self.front.serves_clients = entry.session_mode != "per_client"
        self.front.fronts.servers.add(self)
        self._changed = anyio.Event()
        self._lost = anyio.Event()
        self._scope = anyio.CancelScope()
        # called (never awaited) when the server says a list changed: the composition applies it
        self.on_list_changed: Callable[[], None] | None = None

    @property
    def what(self) -> str:
        if self.entry.command:
            return f"command {self.entry.command!r}"
        return f"URL {shown_url(self.entry.url or '')}"

    def describe(self, exc: BaseException) -> str:
        """Why a session could not be opened or kept, in one line without secrets."""
        last = self.relay.last_line if self.relay else ""
        if isinstance(exc, TimeoutError):
            said = f"; its last stderr line: {last}" if last else ""
            return f"no answer to initialize within {self.entry.start_timeout:g} s{said}"
        if last:
            return last
        status = self._http.status
        if status == 401 and self._http.wants_oauth and self.entry.auth is None:
            return WANTS_OAUTH.format(name=self.name)
        if status:
            hint = HTTP_HINTS.get(status, "")
            return f"HTTP {status}" + (f": {hint}" if hint else "")
        text = error_reason(exc).removeprefix("Client failed to connect: ")
        if self.entry.url:
            text = text.replace(self.entry.url, shown_url(self.entry.url))
        return text

    def unavailable(self) -> str | None:
        """Why a call cannot go through now, or None when the server is up."""
        if self.state == "up":
            return None
        if self.state == "needs-login" or self._needs_login:  # (or about to be: restarting)
            if self.subject() is not None:
                return None  # the user's own login decides (client())
            return needs_login_line(self.name)
        detail = f": {self.last_error}" if self.last_error else ""
        if self.state == "restarting":
            return f"server {self.name!r} is restarting (attempt {self.attempt}){detail}"
        if self.state == "starting":
            return (
                f"server {self.name!r} is still starting (it has up to "
                f"servers.{self.name}.start_timeout: {self.entry.start_timeout:g} s); its tools "
                "are listed when it is up"
            )
        return f"server {self.name!r} is not available ({self.state}){detail}"

    def not_connected(self) -> ToolError:
        """The error a call gets when no session of this server can take it now."""
        return ToolError(self.unavailable() or f"server {self.name!r} is not connected")

    def call_failed(self, exc: BaseException) -> str | None:
        """A call's error: when it shows the session is gone, start the restart and say so."""
        user = self.subject()
        if user is not None:
            return self.pool.call_failed(f"user:{user}", exc)
        served = SERVED_BY.get()
        if served is not None and served[0] is self:  # (the caller's own session failed)
            if not is_connection_loss(exc):
                return None
            self.pool.close(served[1])  # (the shared session is not the one that ended)
            detail = (self.relay.last_line if self.relay else "") or SESSION_CLOSED
            return f"server {self.name!r} is restarting (attempt 1): {detail}"
        if self._needs_login:
            return needs_login_line(self.name)
        if not is_connection_loss(exc):
            return None
        if self.state != "up":  # another call saw it first
            return self.unavailable()
        self._lost.set()
        detail = (self.relay.last_line if self.relay else "") or SESSION_CLOSED
        return f"server {self.name!r} is restarting (attempt {self.attempt + 1}): {detail}"

    def lists_cached(self) -> bool:
        """Whether the server's tools are listed from the cache (it needs a login)."""
        return self.state == "needs-login" and self._listing is not None

    async def client(self, front: Any = None) -> Client[ClientTransport]:
        """The session's client for the client session *front* (by default the one of the
        request being served): its own or its user's (:meth:`own_session`), else the shared
        one. The proxy's client factory."""
        own = await self.own_session(front)
        if own is not None:
            assert own.client is not None  # (SessionPool.session raises when it did not open)
            return own.client
        if self.state == "needs-login" and self._listing is not None:
            return self._listing  # (lists the cached tools; calls are refused before this)
        if self._client is None or self.state != "up":
            raise self.not_connected()
        return self._client

    async def own_session(
        self, front: Any = None, *, with_level: bool = True
    ) -> PooledSession | None:
        """The pooled session that serves client session *front* (default: the request's), or
        None when the shared one does: ``shared``, the stdio client (the one client: the
        shared session is its own), no client session (the launcher's own listing). A session
        opened again for a client that set a log level is told it (unless *with_level* is
        False: the caller tells it)."""
        user = self.subject()
        if user is not None:
            return await user_session(self.pool, self, user)
        if self.entry.session_mode != "per_client" or not self.front.fronts.own_sessions:
            return None
        if front is None:
            front = request_sources()[2]
        lone = self.front.fronts.lone
        if (
            front is None
            or not lasting(front)
            or (lone is not None and session_connection(front) is session_connection(lone))
        ):
            return None
        if self.state != "up":
            raise self.not_connected()
        key = client_key(front)
        known = self.pool.get(key)
        # (read before it opens: a level set meanwhile is told by set_level itself)
        level = client_log_level(front) if with_level and known is None else None
        session = await self.pool.session(
            key, lambda pooled: self._open_own(pooled, front), what="a client session"
        )
        SERVED_BY.set((self, key))  # (its call's failure is this session's: call_failed)
        if known is None:
            self._close_with(front, key)
            if level is not None:  # (a session opened again after its client set a level)
                await self._tell_level(session.client, None, front, level, None)
        return session

    def client_joined(self, session: Any) -> None:
        """A client session finished its handshake: with sessions per client, its own is opened
        now, in the background (the server sees its client initialize, and may ask for its roots
        at once, as on a direct connection)."""
        if self.entry.session_mode != "per_client" or self.state != "up" or not self.pool.tasks:
            return
        self.pool.tasks.start_soon(self._open_early, session)

    async def _open_early(self, session: Any) -> None:
        try:
            await self.own_session(session)
        except Exception as exc:  # (its first request says why again)
            log.debug("servers.%s: a client's session did not open: %s", self.name, exc)

    async def _open_own(self, pooled: PooledSession, front: Any) -> Client[ClientTransport]:
        link = pooled.link = OwnFront(self.name, self.front.fronts, front)
        pooled.transport = self.transport(process=self.pool.take_early())
        return own_client(pooled.transport, link, self._handler(link))

    def _close_with(self, front: Any, key: str) -> None:
        """The client session's end (HTTP DELETE, expiry, disconnect: its connection's teardown)
        closes its own session."""
        stack = getattr(session_connection(front), "exit_stack", None)
        if stack is not None:
            stack.callback(self.pool.close, key)

    async def front_of(self, session: Any) -> FrontLink:
        """The link that serves client *session*: its own session's, else the shared one."""
        own = await self.own_session(session)
        if own is not None and own.link is not None:
            return own.link  # type: ignore[no-any-return]
        return self.front

    async def set_level(self, session: Any, level: str, request_id: Any = None) -> None:
        """Client *session*'s ``logging/setLevel``, forwarded to its own session when it has one
        (over stdio the launcher's: the one client's) and the server declares ``logging``; a
        shared session's level is every client's: the launcher filters instead."""
        if self.entry.session_mode != "per_client" or self.state != "up":
            return
        try:
            own = await self.own_session(session, with_level=False)
        except Exception as exc:  # (the client still has the launcher's filter)
            log.debug("servers.%s: logging/setLevel not forwarded: %s", self.name, exc)
            return
        if own is not None:
            await self._tell_level(own.client, own.link, session, level, request_id)
        elif self.front.fronts.lone is not None:
            await self._tell_level(self._client, self.front, session, level, request_id)

    async def _tell_level(
        self, client: Any, link: FrontLink | None, session: Any, level: str, request_id: Any
    ) -> None:
        """``logging/setLevel`` on *client*'s session when the server declares ``logging``; its
        log messages meanwhile are tied to the client's request *request_id*."""
        declared = client.initialize_result if client is not None else None
        if declared is None or declared.capabilities.logging is None:
            return
        tied = link is not None and request_id is not None
        try:
            with link.calling(session, request_id) if tied else nullcontext():  # type: ignore[union-attr]
                await send_raw_request(client, "logging/setLevel", {"level": level})
        except Exception as exc:  # (the client still has the launcher's filter)
            log.debug("servers.%s: logging/setLevel not forwarded: %s", self.name, exc)

    def pool_size(self) -> tuple[int, int]:
        """(sessions of single clients or users open now, ``max_sessions``)."""
        return self.pool.open, self.entry.max_sessions

    def sessions_line(self) -> str:
        """How client sessions map to this server's sessions, for ``--check``: with a shared
        session, exactly what the clients share."""
        entry = self.entry
        mode = entry.session_mode
        if mode == "shared":
            return SHARED_LINE
        open_now, most = self.pool_size()
        who = "client session" if mode == "per_client" else "signed-in user"
        line = (
            f"{mode}: one per {who} ({open_now} of {most} open, closed after "
            f"{entry.session_idle_timeout:g} s unused)"
        )
        if mode == "per_client":
            line += "; over stdio the one client's is the launcher's own"
        return line

    def proxy(self) -> FastMCP:
        return FastMCPProxy(client_factory=self.client, name=self.name)

    async def wait_started(self) -> None:
        """Until the first session is up; raises :class:`ExternalStartError` if it failed."""
        while self.state == "starting":
            await self._changed.wait()
        if self.state not in ("up", "needs-login"):
            raise ExternalStartError(f"{self.what} failed to start: {self.last_error}")

    def _set(self, state: State) -> None:
        self.state = state
        self._changed.set()
        self._changed = anyio.Event()

    def stop(self) -> None:
        """End the session for good (the server was removed from the config)."""
        self._scope.cancel()

    async def run(self) -> None:
        """Open the session, keep it, reopen it when it dies, until stopped. Never raises.

        When it ends (stopped by a reload, or never started) the stderr relay is closed too:
        its pipe and thread would otherwise stay until the launcher exits, one per reload."""
        try:
            with self._scope:
                async with anyio.create_task_group() as self.pool.tasks:
                    if self.pool.early is not None:
                        self.pool.tasks.start_soon(self.pool.expire_early)
                    await self._keep()
                    self.pool.tasks.cancel_scope.cancel()
            if self.state == "starting":
                self.last_error = "stopped before it started"
                self._set("failed")
        finally:
            await self._close_listing()
            await self.pool.drop_early()
            self.close()

    async def _keep(self) -> None:
        delay = FIRST_BACKOFF
        while True:
            self._counted = False  # set when this round's session went down (its attempt counted)
            try:
                await self._serve_one_session()
                delay = FIRST_BACKOFF  # it was up: the next failure starts a fresh backoff
            except Exception as exc:
                self.last_error = self.describe(exc)[:300]
            if self._needs_login:
                await self._await_login()
                delay = FIRST_BACKOFF
                continue
            if self.state == "starting":
                self._set("failed")
                return  # a server that never started is skipped, not retried
            if not self._counted:
                self.attempt += 1
                self._set("restarting")
            log.warning(
                "servers.%s: session ended; restarting in %g s (attempt %d): %s",
                self.name,
                delay,
                self.attempt,
                self.last_error or "no error text",
            )
            await anyio.sleep(delay)
            self.restarts += 1
            delay = min(delay * 2, MAX_BACKOFF)

    @property
    def store(self) -> TokenStore:
        if self._store is None:
            self._store = TokenStore()
        return self._store

    def _login_missing(self) -> None:
        self._needs_login = True

    async def _await_login(self) -> None:
        """Until the token store holds a new login: meanwhile calls answer that one is needed,
        and the tools listed last stay listed. (Returns at once when the login changed since
        this round read it: another launcher refreshed it, or a login just finished.)"""
        line = needs_login_line(self.name)
        store = self.store
        if await anyio.to_thread.run_sync(store.stamp, self.name) != self._stamp:
            return
        self.last_error = line
        if self.state != "needs-login":
            log.warning("servers.%s: %s", self.name, line)
            await self._open_listing(line)
            self._set("needs-login")
        while await anyio.to_thread.run_sync(store.stamp, self.name) == self._stamp:
            await anyio.sleep(LOGIN_POLL)

    async def _logged_out(self) -> bool:
        """Whether the login this session uses was removed (``dpt-launch logout``) or refused."""
        stamp = await anyio.to_thread.run_sync(self.store.stamp, self.name)
        if stamp == self._stamp:
            return False
        self._stamp = stamp  # (a refresh of ours changes it too: the login is still there)
        record = await anyio.to_thread.run_sync(self.store.get, self.name)
        return not usable(record, self.entry.url or "")

    async def _open_listing(self, line: str) -> None:
        tools = await anyio.to_thread.run_sync(self.store.load_tools, self.name)
        listing = Client(cached_listing(self.name, tools, line))
        await listing.__aenter__()
        self._listing = listing

    async def _close_listing(self) -> None:
        listing, self._listing = self._listing, None
        if listing is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await listing.__aexit__(None, None, None)

    async def _serve_one_session(self) -> None:
        self._needs_login = False
        if self.entry.auth is not None:
            store = self.store
            self._stamp = await anyio.to_thread.run_sync(store.stamp, self.name)
            record = await anyio.to_thread.run_sync(store.get, self.name)
            if not usable(record, self.entry.url or ""):
                self._needs_login = True
                raise ExternalStartError(needs_login_line(self.name))
        hello = await client_hello.client_params()  # (the stdio client's own, else None)
        transport = self.transport()
        self._http.clear()
        front = self.front
        client = self._shared_client(transport, hello)
        with anyio.fail_after(self.entry.start_timeout):
            await client.__aenter__()
        try:
            came_back = self.state == "needs-login"
            if self.entry.auth is not None:
                tools = [
                    t.model_dump(mode="json", by_alias=True, exclude_none=True)
                    for t in await client.list_tools()
                ]
                await anyio.to_thread.run_sync(self.store.save_tools, self.name, tools)
            await self._close_listing()
            self._client = front.client = client
            self.pipe = getattr(transport, "pipe", None)
            pass_notifications(transport, front.notify)
            self.last_error = ""
            self.attempt = 0  # up again: the next outage counts its attempts from 1
            self._lost = anyio.Event()
            self._set("up")
            await front.resubscribe()
            if came_back and self.on_list_changed is not None:
                self.on_list_changed()  # (its tools may differ from the cached list)
            why = await self._watch(client)
            self.last_error = why or (self.relay.last_line if self.relay else "") or SESSION_CLOSED
        finally:
            self._client = front.client = None
            self.pipe = None
            if self.state == "up":  # calls say so while the old session closes
                self.attempt += 1
                self._counted = True
                self._set("restarting")
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await client.__aexit__(None, None, None)

    def _shared_client(
        self, transport: Any, hello: dict[str, Any] | None
    ) -> Client[ClientTransport]:
        """The shared session's client: over stdio it tells the server what the one client said
        in its ``initialize`` (*hello*); else the launcher's name, with every capability."""
        front = self.front
        handler = self._handler(front)
        client = stdio_client(transport, front, handler, hello) if hello is not None else None
        if client is not None:
            return client
        client = Client(transport, mode="legacy", message_handler=handler, log_handler=front.log)
        answer_server_requests(
            client, sampling=front.sampling, elicitation=front.elicitation, roots=front.roots
        )
        return client

    def _handler(self, link: FrontLink) -> Callable[[Any], Any]:
        """The message handler of a session whose client side is *link*: a server's
        ``notifications/*/list_changed`` is handed on (the session's reader must not wait:
        listing again needs it); ``notifications/resources/updated`` reaches the clients of
        *link* subscribed to that resource."""

        async def on_message(message: Any) -> None:
            method = getattr(message, "method", None)
            if method in LIST_CHANGED and isinstance(link, OwnFront):
                await link.list_changed(method)  # (that client's lists: it alone is told)
            elif method in LIST_CHANGED and self.on_list_changed is not None:
                self.on_list_changed()
            elif method == "notifications/resources/updated":
                uri = getattr(getattr(message, "params", None), "uri", None)
                if uri is not None:
                    await link.resource_updated(str(uri))

        return on_message

    def calls_in_flight(self, client: Client[ClientTransport]) -> int:
        """Requests of ours the server has not answered yet: on the SDK session (relayed calls
        over HTTP, prompts, resources, listings) and on the stdio fast path's pipe."""
        pipe = self.pipe
        return requests_in_flight(client) + (len(pipe.pending) if pipe is not None else 0)

    async def _watch(self, client: Client[ClientTransport]) -> str:
        """Return when the session is gone (a call saw it close, or a ping failed): why, when it
        is worth more than the server's last stderr line.

        A ping unanswered while a call is in flight is not a hang: a server that handles one
        message at a time answers it after the call, and each call is ended at its own
        ``timeout`` anyway (it then leaves the counts of :meth:`calls_in_flight`)."""
        limit = self.entry.ping_timeout
        while True:
            with anyio.move_on_after(PING_INTERVAL):
                await self._lost.wait()
                return ""
            if self.entry.auth is not None and await self._logged_out():
                self._needs_login = True
                return needs_login_line(self.name)
            try:
                with anyio.fail_after(limit):
                    await client.ping()
            except TimeoutError:
                if self.calls_in_flight(client):
                    continue
                return f"no answer to a ping within {limit:g} s (hung?)"
            except Exception:
                return ""

    def transport(self, auth: Any = None, process: Any = None) -> Any:
        """The session's transport; *auth*: a user's OAuth (else the launcher's own login);
        *process*: a command's process started already (else the early start's, once)."""
        if auth is None and self.entry.url and self.entry.auth is not None:
            auth = serving_auth(
                self.name, self.entry, self.store, on_needs_login=self._login_missing
            )
        if process is None:
            early, self._early = self._early, None
            process = early.process if early is not None else None
        return session_transport(
            self.name, self.entry, self.base_dir, self.relay, self._http, auth, process
        )

    def close(self) -> None:
        early, self._early = self._early, None
        first, self.pool.early = self.pool.early, None
        for process in (early.process if early is not None else None, first):
            if process is not None:  # (never used: stopped before its first session)
                with contextlib.suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)
        if self.relay is not None:
            self.relay.close()
