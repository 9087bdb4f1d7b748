"""External MCP servers (a ``command`` or a ``url``), proxied with one long-lived session each.

Each server has a :class:`Supervisor`: a task that opens the session, keeps it for
every call (never a process or an HTTP session per request), notices when it
dies, and opens it again with exponential backoff (1 s doubling to 30 s). While
it is down, the server's tools stay listed and calls to them return an error
saying so. A child's stderr reaches the launcher's stderr line by line, prefixed
with its mount name; its stdout carries only the protocol.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO
from urllib.parse import urlsplit, urlunsplit

import anyio

from ..config.schema import DEFAULT_MAX_LINE_BYTES, ServerEntry
from ..reasons import error_reason
from .front import FrontLink, Fronts

if TYPE_CHECKING:
    from fastmcp import Client, FastMCP

    from .child_pipe import ChildPipe
    from .tokens import TokenStore

log = logging.getLogger("dpt-launch")

FIRST_BACKOFF, MAX_BACKOFF = 1.0, 30.0
PING_INTERVAL = 2.0  # a live session is pinged this often (a dead child fails at once)
MAX_STDERR_LINE = 8 * 1024  # bytes of one stderr line of a child passed on
MAX_EVENT_BYTES = DEFAULT_MAX_LINE_BYTES  # one SSE event (one reply) from a URL server
HTTP_HINTS = {
    401: "the server refused the credentials; check the entry's headers",
    403: "the server refused the credentials; check the entry's headers",
    404: "no MCP endpoint at this URL; check its path (often /mcp, or /sse for an SSE server)",
}

# why a session ended when nothing says more (no error, no stderr line): the same words whether
# a call or the supervisor's ping saw it first, so a call's answer does not depend on which did
SESSION_CLOSED = "the session closed"
LOGIN_POLL = 1.0  # seconds between looks for a new login while a server needs one
WANTS_OAUTH = (
    "HTTP 401: the server wants an OAuth login; add 'auth: oauth' under servers.{name} in the "
    "config, then run dpt-launch login {name}"
)

State = Literal["starting", "up", "restarting", "failed", "needs-login"]
LIST_CHANGED = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    }
)


class ExternalStartError(Exception):
    """An external server could not be started or reached; the message says which and why."""


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


def shown_url(url: str) -> str:
    """*url* as messages show it: no user or password, no query values (tokens ride there)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = re.sub(r"=[^&]*", "=***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def is_sse_url(url: str) -> bool:
    """An SSE (2024-11-05 era) endpoint: its path ends in ``/sse``, whatever the query says."""
    return urlsplit(url).path.rstrip("/").endswith("/sse")


def _is_connection_loss(exc: BaseException | None) -> bool:
    """Whether an error (or one it was raised from) says the session's connection is gone."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | EOFError):
            return True
        if type(exc).__name__ in ("McpError", "MCPError") and any(
            text in str(exc)
            for text in ("Connection closed", "Session terminated", "Session not found")
        ):
            return True  # (the last two: an HTTP server that restarted and forgot our session)
        if "SSE stream ended without a response" in str(exc):
            return True  # the streamable-HTTP server went away during the call
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class UserSession:
    """One signed-in user's own session to an OAuth server (their login, their tokens); or, while
    they have no usable login, a listing of the server's cached tools whose calls say so."""

    def __init__(self, user: str, stamp: str) -> None:
        self.user = user
        self.stamp = stamp  # the user's login as this session read it
        self.client: Client | None = None
        self.listing = False
        self.error = ""
        self.ready = anyio.Event()
        self.done = anyio.Event()


class Supervisor:
    """Owns one external server's session for the launcher's lifetime."""

    def __init__(
        self, name: str, entry: ServerEntry, base_dir: Path, fronts: Fronts | None = None
    ) -> None:
        """*fronts*: the launcher's client sessions, which the server's own requests and log
        messages reach (:mod:`.front`); without it they reach no client."""
        self.name = name
        self.entry = entry
        self.base_dir = base_dir
        self.state: State = "starting"
        self.attempt = 0
        self.restarts = 0  # sessions started again after one ended (dpt_external_server_restarts)
        self.last_error = ""
        self.relay = StderrRelay(name) if entry.command else None
        self._client: Client | None = None
        self._counted = False
        self._http_status = 0  # the last HTTP error status a URL server answered (0: none)
        self._wants_oauth = False  # a 401 came with WWW-Authenticate
        self._needs_login = False  # this round found no usable login (entry.auth)
        self._stamp = ""  # the token store's stamp when this round read the login
        self._listing: Client | None = None  # the cached tool list, served while needs-login
        self._store: TokenStore | None = None
        # the signed-in user a call serves (an OAuth server's calls then use that user's login)
        self.subject: Callable[[], str | None] = lambda: None
        self._users: dict[str, UserSession] = {}
        self._user_tasks: Any = None  # the task group the users' sessions live in (run())
        self.pipe: ChildPipe | None = None  # a command's stdin/stdout while up (the fast path)
        self.front = FrontLink(name, fronts or Fronts())
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

    def _describe(self, exc: BaseException) -> str:
        """Why a session could not be opened or kept, in one line without secrets."""
        last = self.relay.last_line if self.relay else ""
        if isinstance(exc, TimeoutError):
            said = f"; its last stderr line: {last}" if last else ""
            return f"no answer to initialize within {self.entry.start_timeout:g} s{said}"
        if last:
            return last
        status = self._http_status
        if status == 401 and self._wants_oauth and self.entry.auth is None:
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
            from .oauth import needs_login_line

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

    def call_failed(self, exc: BaseException) -> str | None:
        """A call's error: when it shows the session is gone, start the restart and say so."""
        user = self.subject()
        if user is not None:
            return self._user_call_failed(user, exc)
        if self._needs_login:
            from .oauth import needs_login_line

            return needs_login_line(self.name)
        if not _is_connection_loss(exc):
            return None
        if self.state != "up":  # another call saw it first
            return self.unavailable()
        self._lost.set()
        detail = (self.relay.last_line if self.relay else "") or SESSION_CLOSED
        return f"server {self.name!r} is restarting (attempt {self.attempt + 1}): {detail}"

    def lists_cached(self) -> bool:
        """Whether the server's tools are listed from the cache (it needs a login)."""
        return self.state == "needs-login" and self._listing is not None

    async def client(self) -> Client:
        """The live session's client (the proxy's client factory)."""
        from fastmcp.exceptions import ToolError

        user = self.subject()
        if user is not None:
            return await self._user_client(user)
        if self.state == "needs-login" and self._listing is not None:
            return self._listing  # (lists the cached tools; calls are refused before this)
        if self._client is None or self.state != "up":
            raise ToolError(self.unavailable() or f"server {self.name!r} is not connected")
        return self._client

    def proxy(self) -> FastMCP:
        from fastmcp.server.providers.proxy import FastMCPProxy

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
                async with anyio.create_task_group() as self._user_tasks:
                    await self._keep()
                    self._user_tasks.cancel_scope.cancel()
            if self.state == "starting":
                self.last_error = "stopped before it started"
                self._set("failed")
        finally:
            await self._close_listing()
            self.close()

    async def _keep(self) -> None:
        delay = FIRST_BACKOFF
        while True:
            self._counted = False  # set when this round's session went down (its attempt counted)
            try:
                await self._serve_one_session()
                delay = FIRST_BACKOFF  # it was up: the next failure starts a fresh backoff
            except Exception as exc:
                self.last_error = self._describe(exc)[:300]
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

    async def _user_client(self, user: str) -> Client:
        """*user*'s own session (opened on their first call), or their listing while they have no
        usable login. Another user's session never serves them."""
        from fastmcp.exceptions import ToolError

        stamp = await anyio.to_thread.run_sync(self.store.stamp, self.name, user)
        session = self._users.get(user)
        if session is not None and session.stamp != stamp and session.ready.is_set():
            session.done.set()  # a new login (or a logout): open again
            session = None
        if session is None:
            if self._user_tasks is None:
                raise ToolError(f"server {self.name!r} is not connected")
            session = self._users[user] = UserSession(user, stamp)
            self._user_tasks.start_soon(self._serve_user, session)
        await session.ready.wait()
        if session.client is None:
            raise ToolError(session.error or f"server {self.name!r} is not connected")
        return session.client

    def _user_call_failed(self, user: str, exc: BaseException) -> str | None:
        """A user's call failed: when their login was refused or their session is gone, close it
        (the next call opens a new one) and say so."""
        session = self._users.get(user)
        if session is None:
            return None
        if session.error:  # (set when the refresh was refused: the login's line)
            session.done.set()
            return session.error
        if not _is_connection_loss(exc):
            return None
        session.done.set()
        return (
            f"server {self.name!r}: the session of user {user!r} closed; the next call reopens it"
        )

    async def _serve_user(self, session: UserSession) -> None:
        """Keep *session* open until it is done (a new login, a refused refresh, a lost
        connection, or the supervisor ends)."""
        from fastmcp import Client

        from .oauth import cached_listing, needs_login_line, serving_auth, usable

        user = session.user
        store = self.store

        def refused() -> None:
            session.error = needs_login_line(self.name, user)
            session.done.set()

        def kept(stamp: str) -> None:  # (a refresh of ours is no new login: the session stays)
            session.stamp = stamp

        try:
            record = await anyio.to_thread.run_sync(store.get, self.name, user)
            if usable(record, self.entry.url or ""):
                auth = serving_auth(
                    self.name, self.entry, store, user, on_needs_login=refused, on_saved=kept
                )
                transport = self._transport(auth)
            else:
                tools = await anyio.to_thread.run_sync(store.load_tools, self.name)
                transport = cached_listing(self.name, tools, needs_login_line(self.name, user))
                session.listing = True
            client = Client(transport)
            with anyio.fail_after(self.entry.start_timeout):
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
                f"server {self.name!r} (user {user!r}): {self._describe(exc)[:300]}"
            )
        finally:
            session.ready.set()
            if self._users.get(user) is session:
                del self._users[user]

    @property
    def store(self) -> TokenStore:
        if self._store is None:
            from .tokens import TokenStore

            self._store = TokenStore()
        return self._store

    def _login_missing(self) -> None:
        self._needs_login = True

    async def _await_login(self) -> None:
        """Until the token store holds a new login: meanwhile calls answer that one is needed,
        and the tools listed last stay listed. (Returns at once when the login changed since
        this round read it: another launcher refreshed it, or a login just finished.)"""
        from .oauth import needs_login_line

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
        from .oauth import usable

        stamp = await anyio.to_thread.run_sync(self.store.stamp, self.name)
        if stamp == self._stamp:
            return False
        self._stamp = stamp  # (a refresh of ours changes it too: the login is still there)
        record = await anyio.to_thread.run_sync(self.store.get, self.name)
        return not usable(record, self.entry.url or "")

    async def _open_listing(self, line: str) -> None:
        from fastmcp import Client

        from .oauth import cached_listing

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
        from fastmcp import Client

        self._needs_login = False
        if self.entry.auth is not None:
            from .oauth import needs_login_line, usable

            store = self.store
            self._stamp = await anyio.to_thread.run_sync(store.stamp, self.name)
            record = await anyio.to_thread.run_sync(store.get, self.name)
            if not usable(record, self.entry.url or ""):
                self._needs_login = True
                raise ExternalStartError(needs_login_line(self.name))
        transport = self._transport()
        self._http_status = 0
        self._wants_oauth = False
        from ...seams.client_sessions import answer_server_requests

        front = self.front
        client = Client(
            transport, mode="legacy", message_handler=self._on_message, log_handler=front.log
        )
        answer_server_requests(
            client, sampling=front.sampling, elicitation=front.elicitation, roots=front.roots
        )
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

    async def _on_message(self, message: Any) -> None:
        """A server's ``notifications/*/list_changed`` is handed on (the session's reader must
        not wait: listing again needs it); ``notifications/resources/updated`` reaches the
        clients subscribed to that resource."""
        method = getattr(message, "method", None)
        if method in LIST_CHANGED and self.on_list_changed is not None:
            self.on_list_changed()
        elif method == "notifications/resources/updated":
            uri = getattr(getattr(message, "params", None), "uri", None)
            if uri is not None:
                await self.front.resource_updated(str(uri))

    def calls_in_flight(self, client: Client) -> int:
        """Requests of ours the server has not answered yet: on the SDK session (relayed calls
        over HTTP, prompts, resources, listings) and on the stdio fast path's pipe."""
        from ...seams.client_sessions import requests_in_flight

        pipe = self.pipe
        return requests_in_flight(client) + (len(pipe.pending) if pipe is not None else 0)

    async def _watch(self, client: Client) -> str:
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
                from .oauth import needs_login_line

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

    def _transport(self, auth: Any = None) -> Any:
        """The session's transport; *auth*: a user's OAuth (else the launcher's own login)."""
        entry = self.entry
        if entry.command:
            from .child import wrapped_command
            from .child_pipe import child_transport

            command, args = wrapped_command(entry.command, list(entry.args))
            cwd = str((self.base_dir / entry.cwd).resolve()) if entry.cwd else None
            if cwd is not None and not os.path.isdir(cwd):
                raise ExternalStartError(f"its cwd {cwd} is not a folder")
            return child_transport(
                command,
                args,
                env={**os.environ, **entry.env},
                cwd=cwd,
                errlog=self.relay.file if self.relay else sys.stderr,
                max_line=entry.max_line_bytes,
                name=self.name,
            )
        assert entry.url
        headers = dict(entry.headers)
        if auth is None and entry.auth is not None:
            from .oauth import serving_auth

            auth = serving_auth(self.name, entry, self.store, on_needs_login=self._login_missing)
        if is_sse_url(entry.url):
            from fastmcp.client.transports import SSETransport

            return SSETransport(
                entry.url, headers=headers, auth=auth, httpx_client_factory=self._http_client
            )
        from fastmcp.client.transports import StreamableHttpTransport

        return StreamableHttpTransport(
            entry.url,
            headers=headers,
            auth=auth,
            httpx_client_factory=self._http_client,
            max_sse_event_size=MAX_EVENT_BYTES,
        )

    def _http_client(
        self, headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None, **_: Any
    ) -> Any:
        """The SDK's default HTTP client, noting error statuses: "HTTP 401" says more than the
        SDK's "Server returned an error response". (fastmcp's ``follow_redirects`` is dropped, as
        with the SDK's default client: the transports follow same-origin redirects themselves.)"""
        from ...seams.http_sessions import mcp_http_client

        async def note_status(response: Any) -> None:
            if response.status_code >= 400:
                self._http_status = response.status_code
                self._wants_oauth = "www-authenticate" in response.headers

        client = mcp_http_client(headers, timeout, auth)
        client.event_hooks.setdefault("response", []).append(note_status)
        return client

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
