"""What an external server asks of the client reaches the client: sampling, elicitation, roots, logs.

Each :class:`~.supervisor.Supervisor` keeps one long-lived session to its server, so the
server's own requests (``sampling/createMessage``, ``elicitation/create``, ``roots/list``)
and its ``notifications/message`` arrive in that session's receive loop, where no
front request is current (fastmcp's proxy handlers rely on one). A :class:`FrontLink`
per server knows the front sessions (the launcher's clients) with a call in flight to
it, and answers the server's requests by asking that client:

* one client session has calls in flight to the server: that session (over HTTP, on
  the stream of its latest call);
* none, over stdio: the one client (:attr:`Fronts.lone`), e.g. a server that asks
  for roots outside a call, and every call of the stdio fast path; a ``roots/list`` sent
  before that client has connected (at the server's start) waits for it
  (:data:`EARLY_ROOTS_WAIT`);
* none over HTTP: an error naming the reason (nothing on the wire says which call a
  server's request belongs to, and the launcher never guesses). Calls from several sessions
  are never in flight to one server at once: :class:`SessionTurns` lets one session's calls
  through at a time (a call not relayed by :mod:`.relay` would still get the error).
  A notification (a log message, one no MCP version defines) goes to the one HTTP client
  connected, on its own stream, as on a direct connection, when that client may see the
  server (its ``access:`` rules and its endpoint's profile, judged by the composition when
  it connected: ``told``); with several, or one that may not, it is dropped.

A client that did not declare the capability is not asked: the server gets the error
the official client answers then (-32600 "Sampling not supported" and the like), except
for roots: an empty list (alone, the server would not have asked, and would serve as
with no roots; an error would fail its tools). Children are told the client samples with
tools (``sampling.tools``); a sampling request that offers tools to a client that did not
declare them gets the -32602 the server's own SDK raises alone. The client's answer, or its
error, goes back to the server unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NamedTuple

import anyio
import mcp_types
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST

from ...seams.client_sessions import send_raw_request
from ...seams.fastmcp_server import client_log_level
from ...seams.server_sessions import notify_client, send_raw_to_client, session_connection

log = logging.getLogger("dpt-launch")

# The MCP log levels by severity (RFC 5424 order), for logging/setLevel's minimum.
LOG_SEVERITY = {
    name: rank
    for rank, name in enumerate(
        ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
    )
}
SEE_DOCS = "see 'Forwarded to the client' in docs/launcher.md"
# seconds a server's roots/list sent before the stdio client connected waits for it (below the
# 60 s the TypeScript SDK's requests wait for an answer)
EARLY_ROOTS_WAIT = 30.0
MAX_TASKS = 10_000  # task ids remembered per server (the oldest are forgotten first)


class HttpClient(NamedTuple):
    """An HTTP client session as :class:`Fronts` knows it from its handshake to its end."""

    session: Any
    # whether it may be told of a server (by mount name): its caller's access and its profile,
    # as the composition judged them at its handshake; None: of every one
    told: Callable[[str], bool] | None


class Fronts:
    """The launcher's client sessions as the external servers' requests need them.

    One per composition (held by the session registry, which feeds it); shared by
    every :class:`FrontLink`.
    """

    def __init__(self) -> None:
        self.lone: Any = None  # the stdio client's session, once it is initialized
        self.links: weakref.WeakSet[FrontLink] = weakref.WeakSet()
        self.servers: weakref.WeakSet[Any] = weakref.WeakSet()  # the external servers' supervisors
        # client sessions may have sessions of their own (sessions: per_client); not when only
        # the launcher itself lists and calls (--check, the tools and call verbs)
        self.own_sessions = True
        # set once the stdio client is ready, or once it is known none will come (HTTP, --check)
        self.settled = anyio.Event()
        # HTTP client sessions by their Mcp-Session-Id, from their handshake to their end (the
        # HTTP fast path serves a session's calls only once it is known here; a shared session's
        # message outside any call goes to the one connected: only_client)
        self.http: dict[str, HttpClient] = {}

    def _remember_http(self, session: Any, told: Callable[[str], bool] | None) -> None:
        connection = session_connection(session)
        session_id = getattr(connection, "session_id", None)
        stack = getattr(connection, "exit_stack", None)
        if isinstance(session_id, str) and stack is not None:  # (forgotten at its teardown)
            self.http[session_id] = HttpClient(session, told)
            stack.callback(self.http.pop, session_id, None)

    def no_lone_client(self) -> None:
        """No stdio client will come (serving HTTP, or ``--check``): requests stop waiting."""
        self.settled.set()

    async def client_ready(
        self, session: Any, *, stdio: bool, told: Callable[[str], bool] | None = None
    ) -> None:
        """A client finished its handshake: over HTTP each server with sessions per client opens
        its session now (as a direct connection would be, when the client initialized); over
        stdio it is the one client, and servers that asked for roots before it could answer are
        told the roots changed. *told* says which servers (by mount name) an HTTP client may
        hear of outside any call; None: every one."""
        if not stdio:
            self._remember_http(session, told)
            for server in list(self.servers):
                server.client_joined(session)
            return
        self.lone = session
        self.settled.set()
        if _declares(session, "roots"):
            for link in list(self.links):
                if link.asked_roots_early:
                    link.asked_roots_early = False
                    await link.tell_roots_changed()

    def only_client(self) -> Any:
        """The one HTTP client session connected, or None when there are none or several."""
        if len(self.http) != 1:
            return None
        return next(iter(self.http.values())).session

    def may_tell(self, session: Any, server: str) -> bool:
        """Whether HTTP client *session* may hear of *server* (mount name) outside any call."""
        session_id = getattr(session_connection(session), "session_id", None)
        client = self.http.get(session_id) if isinstance(session_id, str) else None
        return client is None or client.told is None or client.told(server)

    async def set_level(self, session: Any, level: str, request_id: Any = None) -> None:
        """Client *session* asked for *level* (its request *request_id*): each server's session
        of its own is told; the log messages that answers go out before the reply."""
        for server in list(self.servers):
            await server.set_level(session, level, request_id)

    async def roots_changed(self, session: Any = None) -> None:
        """The roots of the client of *session* changed: every external server's session that
        serves it is told (the shared ones, and that client's own), so it asks again."""
        for link in list(self.links):
            if session is None or link.follows(session):
                await link.tell_roots_changed()


class SessionTurns:
    """One client session at a time sends calls to a server: another session's calls wait for
    its turn (sessions take turns in arrival order; a session waiting holds back new calls of
    the current one, so none starves). Nothing on the wire ties a server's request to one of
    its calls in flight: with one session's calls in flight, it is that session's.
    """

    def __init__(self) -> None:
        self.owner: int | None = None  # the client connection whose turn it is
        self.running = 0  # its calls in flight
        self.woken = 0  # its calls let in but not yet running
        self.waiting: dict[int, list[Any]] = {}  # connection -> [event, calls waiting], in order

    @contextlib.asynccontextmanager
    async def turn(self, session: Any) -> AsyncIterator[None]:
        await self._enter(id(session_connection(session)))
        try:
            yield
        finally:
            self.running -= 1
            if self.running == 0 and self.woken == 0:
                self._pass_on()

    async def _enter(self, key: int) -> None:
        if self.owner is None and not self.waiting:
            self.owner = key
        elif self.owner != key or self.waiting:
            entry = self.waiting.setdefault(key, [anyio.Event(), 0])
            entry[1] += 1
            event = entry[0]
            try:
                await event.wait()
            except BaseException:
                if event.is_set():  # let in meanwhile: the turn passes on if it was the last
                    self.woken -= 1
                    if self.woken == 0 and self.running == 0:
                        self._pass_on()
                else:
                    entry[1] -= 1
                    if entry[1] == 0:
                        del self.waiting[key]
                raise
            self.woken -= 1
        self.running += 1

    def _pass_on(self) -> None:
        if not self.waiting:
            self.owner = None
            return
        key = next(iter(self.waiting))
        event, count = self.waiting.pop(key)
        self.owner, self.woken = key, count
        event.set()


class FrontLink:
    """One external server's way to the client: its session's callbacks (see the module)."""

    filters_levels = True  # the client's logging/setLevel is applied here (not the server's)
    # HTTP clients' calls run on this session (not with sessions per client, where it is the
    # launcher's own): outside any call, its notifications may be the one client's
    serves_clients = True

    def __init__(self, name: str, fronts: Fronts) -> None:
        self.name = name
        self.fronts = fronts
        self.client: Any = None  # the server's live fastmcp Client (set by the supervisor)
        self.asked_roots_early = False
        self._calls: dict[int, tuple[Any, Any]] = {}  # call token -> (session, request id)
        self.turns = SessionTurns()  # relayed calls: one client session at a time
        # the server's resource URI -> {client connection: (its session, the URI as exposed)}
        self._subscribers: dict[str, dict[int, tuple[Any, str]]] = {}
        # the ids of tasks this server made for relayed calls, oldest first (at most MAX_TASKS),
        # each with the client connection it was made for: only that client may ask about it
        self.tasks: dict[str, int] = {}
        self._count = 0
        fronts.links.add(self)

    def has_subscribers(self) -> bool:
        """Whether a client is subscribed to a resource through this link."""
        return any(self._subscribers.values())

    def follows(self, session: Any) -> bool:
        """Whether this link's session serves the client of *session* (a shared one serves
        every client)."""
        return True

    @contextlib.contextmanager
    def calling(self, session: Any, request_id: Any) -> Iterator[None]:
        """A call from *session* (its request *request_id*) is in flight to this server."""
        self._count += 1
        token = self._count
        self._calls[token] = (session, request_id)
        try:
            yield
        finally:
            del self._calls[token]

    def _front(self, what: str) -> tuple[Any, Any]:
        """The session (and its request id, or None) that *what* is for, or an MCPError why none."""
        calls = list(self._calls.values())
        if calls:
            connections = {id(session_connection(session)) for session, _ in calls}
            if len(connections) == 1:
                return calls[-1]
            raise MCPError(
                INVALID_REQUEST,
                f"server {self.name!r} sent {what} while calls from {len(connections)} client "
                f"sessions were in flight to it; the launcher cannot tell which one it is for "
                f"({SEE_DOCS})",
            )
        if self.fronts.lone is not None:
            return self.fronts.lone, None
        raise MCPError(
            INVALID_REQUEST,
            f"server {self.name!r} sent {what} outside any call from a client, and no stdio "
            f"client is connected to forward it to ({SEE_DOCS})",
        )

    async def _ask(
        self,
        what: str,
        capability: str,
        request: Any,
        result_type: type[Any],
        unsupported: str,
        undeclared: Any = None,
    ) -> Any:
        """Send *request* to the front client and return its answer (its error is raised).
        A client that did not declare *capability* gets nothing: the server gets *undeclared*
        when given, else the error *unsupported*."""
        session, request_id = self._front(what)
        if not _declares(session, capability):
            if undeclared is not None:
                return undeclared
            raise MCPError(INVALID_REQUEST, unsupported)
        if isinstance(request, mcp_types.ElicitRequest):
            # As the server wrote it: the typed request's dump adds its defaults (mode: form).
            params = request.params.model_dump(by_alias=True, mode="json", exclude_unset=True)
            answer = await send_raw_to_client(session, request.method, params, request_id)
            return result_type.model_validate(answer, by_name=False)
        metadata = (
            None if request_id is None else ServerMessageMetadata(related_request_id=request_id)
        )
        return await session.send_request(request, result_type, metadata=metadata)

    async def sampling(self, context: Any, params: mcp_types.CreateMessageRequestParams) -> Any:
        with_tools = params.tools is not None or params.tool_choice is not None
        if with_tools and not self._declares_sampling_tools():
            # what the server's own SDK raises, alone, before asking such a client
            raise MCPError(
                mcp_types.INVALID_PARAMS, "Client does not support sampling tools capability"
            )
        result_type = (
            mcp_types.CreateMessageResultWithTools if with_tools else mcp_types.CreateMessageResult
        )
        return await self._ask(
            "sampling/createMessage",
            "sampling",
            mcp_types.CreateMessageRequest(params=params),
            result_type,
            "Sampling not supported",
        )

    def _declares_sampling_tools(self) -> bool:
        """Whether the client this server's sampling goes to declared ``sampling.tools``."""
        try:
            session, _ = self._front("sampling/createMessage")
        except MCPError:
            return True  # (:meth:`_ask` raises the reason)
        declared = getattr(session, "client_capabilities", None)
        sampling = getattr(declared, "sampling", None)
        return getattr(sampling, "tools", None) is not None

    async def elicitation(self, context: Any, params: mcp_types.ElicitRequestParams) -> Any:
        return await self._ask(
            "elicitation/create",
            "elicitation",
            mcp_types.ElicitRequest(params=params),
            mcp_types.ElicitResult,
            "Elicitation not supported",
        )

    async def roots(self, context: Any) -> Any:
        if not self._calls and not self.fronts.settled.is_set():
            # Asked at the server's start, before the stdio client has connected (the reference
            # filesystem server does, once initialized): held until it has, as a direct
            # client would answer with its roots, rather than answered with an error.
            with anyio.move_on_after(EARLY_ROOTS_WAIT):
                await self.fronts.settled.wait()
        try:
            # A client without roots shares no folder: alone, the server would not have
            # asked, and would serve as with no roots (an error here would fail its tools).
            return await self._ask(
                "roots/list",
                "roots",
                mcp_types.ListRootsRequest(),
                mcp_types.ListRootsResult,
                "List roots not supported",
                undeclared=mcp_types.ListRootsResult(roots=[]),
            )
        except MCPError:
            if self.fronts.lone is None and not self._calls:
                self.asked_roots_early = True  # told once a client's roots are known
            raise

    def _told(self, what: str) -> tuple[Any, Any]:
        """The session (and request id) a notification *what* goes to: as a request's
        (:meth:`_front`), or outside any call, with no stdio client, the one HTTP client
        connected (its GET stream, as on a direct connection); an MCPError when there are
        several (a shared session cannot tell whose it is), or one that may not see this server
        (``access:``, its profile: a denied server is absent whole)."""
        try:
            return self._front(what)
        except MCPError:
            only = self.fronts.only_client() if self.serves_clients and not self._calls else None
            if only is None:
                raise
            if not self.fronts.may_tell(only, self.name):
                raise MCPError(
                    INVALID_REQUEST,
                    f"server {self.name!r} sent {what} outside any call, and the one HTTP client "
                    "connected may not see this server (access: rules or its profile)",
                ) from None
            return only, None

    async def log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        """Pass the server's log message on, under its mount name, when the client's level
        admits it; dropped when no one client can be told (see the module)."""
        try:
            session, request_id = self._told("notifications/message")
        except MCPError as exc:
            log.debug("servers.%s: log message dropped: %s", self.name, exc.error.message)
            return
        least = client_log_level(session) if self.filters_levels else None
        if least is not None and LOG_SEVERITY[params.level] < LOG_SEVERITY[least]:
            return
        logger = f"{self.name}/{params.logger}" if params.logger else self.name
        note = mcp_types.LoggingMessageNotification(
            params=mcp_types.LoggingMessageNotificationParams(
                level=params.level, data=params.data, logger=logger
            )
        )
        try:
            await session.send_notification(note, related_request_id=request_id)
        except Exception as exc:  # the client went away meanwhile
            log.debug("servers.%s: could not pass a log message on: %s", self.name, exc)

    def made_task(self, task_id: str, session: Any) -> None:
        """The server made task *task_id* for a relayed call of client *session*: its
        ``tasks/*`` requests go here, and only from that client."""
        self.tasks[task_id] = id(session_connection(session))
        if len(self.tasks) > MAX_TASKS:
            del self.tasks[next(iter(self.tasks))]

    def owns(self, task_id: Any, session: Any) -> bool:
        """Whether this server made task *task_id* for client *session*."""
        owner = self.tasks.get(task_id) if isinstance(task_id, str) else None
        return owner is not None and owner == id(session_connection(session))

    def _task_owner(self, params: Any) -> tuple[Any, Any]:
        """The session (and request id) a task's status notification is for: its client while
        one of its calls is in flight or it is the stdio client; an MCPError otherwise. A status
        sent before the call that makes the task has answered (its id not noted yet) goes where
        that call's logs go: the one client with calls in flight."""
        task_id = params.get("taskId") if isinstance(params, dict) else None
        owner = self.tasks.get(task_id) if isinstance(task_id, str) else None
        if owner is None:
            return self._front("notifications/tasks/status")
        for session, request_id in reversed(list(self._calls.values())):
            if id(session_connection(session)) == owner:
                return session, request_id
        lone = self.fronts.lone
        if lone is not None and id(session_connection(lone)) == owner:
            return lone, None
        raise MCPError(INVALID_REQUEST, "a task status for a client that cannot be told now")

    async def notify(self, method: str, params: Any) -> None:
        """Pass on a notification of the server's that no MCP version defines, as it is, to
        the client it is for (as a log message goes); dropped when no one client can be told.
        A task's status goes to the client the task was made for, never to another."""
        try:
            if method == "notifications/tasks/status":
                session, request_id = self._task_owner(params)
            else:
                session, request_id = self._told(method)
            await notify_client(session, method, params, request_id)
        except MCPError as exc:
            log.debug("servers.%s: %s dropped: %s", self.name, method, exc.error.message)
        except Exception as exc:  # the client went away meanwhile
            log.debug("servers.%s: could not pass %s on: %s", self.name, method, exc)

    async def subscribe(self, session: Any, exposed: str, own: str) -> None:
        """Client *session* subscribes to this server's resource *own* (shown to it as *exposed*):
        the server is asked once, for its first subscriber; its error reaches the client."""
        subscribers = self._subscribers.get(own)
        if not subscribers:
            await send_raw_request(self._live(), "resources/subscribe", {"uri": own})
        self._subscribers.setdefault(own, {})[id(session_connection(session))] = (session, exposed)

    async def read(self, session: Any, request_id: Any, own: str) -> dict[str, Any]:
        """Read this server's resource *own* for *session*; its error (code, message, data)
        reaches the client as it is."""
        with self.calling(session, request_id):
            return await send_raw_request(self._live(), "resources/read", {"uri": own})

    async def unsubscribe(self, session: Any, own: str) -> None:
        """Client *session* unsubscribes; the server is told when no client is left."""
        subscribers = self._subscribers.get(own, {})
        subscribers.pop(id(session_connection(session)), None)
        if not subscribers:
            await self._drop(own)

    async def _drop(self, own: str) -> None:
        self._subscribers.pop(own, None)
        if self.client is not None:
            with contextlib.suppress(Exception):  # (it is going down: it forgets anyway)
                await send_raw_request(self.client, "resources/unsubscribe", {"uri": own})

    def _live(self) -> Any:
        if self.client is None:
            raise MCPError(INTERNAL_ERROR, f"server {self.name!r} is not connected")
        return self.client

    async def resource_updated(self, own: str) -> None:
        """The server says its resource *own* changed: each subscribed client is told, under the
        URI it subscribed to; a client that cannot be told any more is forgotten."""
        subscribers = self._subscribers.get(own, {})
        for key, (session, exposed) in list(subscribers.items()):
            try:
                await session.send_resource_updated(exposed)
            except Exception as exc:  # the client went away
                log.debug("servers.%s: forgot a subscriber of %s: %s", self.name, own, exc)
                subscribers.pop(key, None)
        if own in self._subscribers and not subscribers:
            await self._drop(own)

    async def resubscribe(self) -> None:
        """A new session to the server (a restart): it is asked again for every resource a
        client subscribed to."""
        for own in list(self._subscribers):
            try:
                await send_raw_request(self._live(), "resources/subscribe", {"uri": own})
            except Exception as exc:
                log.warning("servers.%s: could not subscribe again to %s: %s", self.name, own, exc)

    async def tell_roots_changed(self) -> None:
        """``notifications/roots/list_changed`` to this server, when its session is up."""
        client = self.client
        if client is None:
            return
        try:
            await client.session.send_notification(_roots_list_changed())
        except Exception as exc:  # the session is going down; its next one asks anyway
            log.debug("servers.%s: could not tell it the roots changed: %s", self.name, exc)


def _roots_list_changed() -> Any:
    return mcp_types.RootsListChangedNotification()


def _declares(session: Any, capability: str) -> bool:
    """Whether the client of *session* declared *capability* (sampling, elicitation, roots)."""
    declared = getattr(session, "client_capabilities", None)
    return isinstance(declared, mcp_types.ClientCapabilities) and (
        getattr(declared, capability, None) is not None
    )
