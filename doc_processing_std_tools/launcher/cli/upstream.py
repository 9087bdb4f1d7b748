"""The daemon side of ``dpt-launch connect``: one streamable-HTTP session to the daemon.

:class:`Upstream` posts the client's JSON-RPC messages unchanged, listens on the
session's GET stream for what the daemon sends unasked, notices when the daemon goes
away or restarts (a 404 for our session id), and reopens the session by replaying
the client's ``initialize``. :mod:`.connect` bridges it to stdio.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, NAME_BEARING_METHODS
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER as VERSION_HEADER

from ..errors import LauncherError
from ..reasons import error_reason

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

log = logging.getLogger("dpt-launch")

CONNECT_TIMEOUT = 3.0  # seconds to reach the daemon; a refused connection fails at once
MAX_EVENT_BYTES = 64 * 1024 * 1024  # one SSE event (one reply) may be this big
CONNECTION_CLOSED = -32000  # JSON-RPC error code the mcp SDK uses for a lost connection
REPLAY_ID = "dpt-launch-connect-reinitialize"
Message = dict[str, Any]


class DaemonUnreachable(LauncherError):
    """The daemon could not be reached or broke the connection; the text says why."""


class SessionLost(LauncherError):
    """The daemon answered 404 for our session id: it restarted and forgot the session."""

    def __init__(self, generation: int) -> None:
        super().__init__(generation)
        self.generation = generation  # of the session the daemon forgot


def _describe(exc: BaseException) -> str:
    """The most specific reason in an error's chain, e.g. 'connection refused'."""
    text = error_reason(exc)
    return "connection refused" if "refused" in text.lower() else text


class Upstream:
    """The one MCP session with the daemon, over streamable HTTP."""

    def __init__(self, url: str, http: httpx2.AsyncClient, emit: Callable[[Message], None]) -> None:
        self.url = url
        self.http = http
        self.emit = emit
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.capabilities: dict[str, Any] = {}
        self.initialize: Message | None = None  # the client's, replayed after a restart
        self.open = False  # a session with the daemon is believed alive
        self.generation = 0  # counts sessions, so a late failure of an old one is ignored
        self._lock = anyio.Lock()
        self._get_scope: anyio.CancelScope | None = None

    def hint(self) -> str:
        port = urlsplit(self.url).port or (443 if self.url.startswith("https") else 80)
        return (
            f"start it with: dpt-launch --config YOUR_CONFIG --transport http --port {port} "
            "(or its systemd/launchd service, see docs/daemon.md)"
        )

    def unreachable(self, why: str) -> DaemonUnreachable:
        return DaemonUnreachable(
            f"the dpt-launch daemon at {self.url} is not reachable: {why}; {self.hint()}"
        )

    def _headers(self, message: Message) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream"}
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        meta = params.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        envelope = meta.get("io.modelcontextprotocol/protocolVersion")
        if isinstance(envelope, str) and "method" in message:
            # Modern era: each request carries its version; HTTP headers must mirror the body.
            headers[VERSION_HEADER] = envelope
            headers[MCP_METHOD_HEADER] = message["method"]
            name_key = NAME_BEARING_METHODS.get(message["method"])
            if name_key and isinstance(params.get(name_key), str) and params[name_key].isascii():
                headers[MCP_NAME_HEADER] = params[name_key]
        elif self.protocol_version and message.get("method") != "initialize":
            headers[VERSION_HEADER] = self.protocol_version
        return headers

    async def post(
        self, message: Message, deliver: Callable[[Message], None] | None = None
    ) -> None:
        """POST one message; replies and server messages on its stream go to *deliver*.

        Raises :class:`SessionLost` on 404 for our session, :class:`DaemonUnreachable`
        when the connection fails.
        """
        deliver = deliver or self.emit
        request_id = message.get("id") if "method" in message else None
        generation, sent, answered = self.generation, False, False
        try:
            async with self.http.stream(
                "POST", self.url, json=message, headers=self._headers(message)
            ) as response:
                sent = True
                status = response.status_code
                if status == 404 and self.session_id and message.get("method") != "initialize":
                    raise SessionLost(generation)
                if message.get("method") == "initialize" and response.headers.get("mcp-session-id"):
                    self.session_id = response.headers["mcp-session-id"]
                if status == 202 or request_id is None:
                    return
                if status >= 400:
                    await self._deliver_http_error(response, request_id, deliver)
                    return
                kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
                if kind == "application/json":
                    deliver(json.loads(await response.aread()))
                    return
                async for event in httpx2.EventSource(response, max_event_size=MAX_EVENT_BYTES):
                    reply = _parse_event(event)
                    if reply is not None:
                        deliver(reply)
                        if "method" not in reply and reply.get("id") == request_id:
                            answered = True
                            return
        except httpx2.TransportError as exc:
            self.mark_lost(generation)
            if sent:
                raise DaemonUnreachable(
                    f"the dpt-launch daemon at {self.url} stopped answering during this call "
                    f"(it may or may not have run): {_describe(exc)}; if it stopped, {self.hint()}"
                ) from None
            raise self.unreachable(_describe(exc)) from None
        except httpx2.SSEError as exc:
            raise DaemonUnreachable(f"bad reply from the daemon at {self.url}: {exc}") from None
        if request_id is not None and sent and not answered:
            deliver(error_reply(request_id, f"the daemon at {self.url} sent no reply"))

    async def _deliver_http_error(
        self, response: httpx2.Response, request_id: Any, deliver: Callable[[Message], None]
    ) -> None:
        body = (await response.aread())[:2000]
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            deliver({"jsonrpc": "2.0", "id": request_id, "error": parsed["error"]})
            return
        if response.status_code in (401, 403) and "authorization" in self.http.headers:
            why = "it refused our credentials; check the token in the variable given to --token-env"
        elif response.status_code in (401, 403):
            why = (
                "it wants a token and none was sent; add --token-env VAR, "
                "VAR being an environment variable holding the daemon's token"
            )
        else:
            # (a balancer's error page is HTML over several lines: the message stays one line)
            text = " ".join(body.decode("utf-8", "replace").split())
            why = f"HTTP {response.status_code}: {text[:200]}"
        deliver(error_reply(request_id, f"the dpt-launch daemon at {self.url} said: {why}"))

    def mark_lost(self, generation: int) -> None:
        """The session of that generation is dead (a later one is left alone)."""
        if generation != self.generation:
            return
        self.open = False
        self.session_id = None
        if self._get_scope is not None:
            self._get_scope.cancel()

    async def first_initialize(self, message: Message) -> Message:
        """Forward the client's ``initialize``; its reply (or the error) is returned."""
        self.initialize = message
        replies: list[Message] = []
        async with self._lock:
            await self.post(message, replies.append)
            reply = next((r for r in replies if r.get("id") == message.get("id")), None)
            if reply is None:
                raise self.unreachable("no reply to initialize")
            self._took(reply)
        return reply

    def _took(self, reply: Message) -> None:
        result = reply.get("result")
        if isinstance(result, dict):
            self.protocol_version = result.get("protocolVersion")
            caps = result.get("capabilities")
            self.capabilities = caps if isinstance(caps, dict) else {}
            self.open = True
            self.generation += 1

    async def ensure_open(self, group: TaskGroup) -> bool:
        """Reopen the session after a daemon restart; True when it was reopened just now."""
        if self.open or self.initialize is None:
            return False
        async with self._lock:
            if self.open:
                return False
            replay = {**self.initialize, "id": REPLAY_ID}
            replies: list[Message] = []
            self.session_id = None
            await self.post(replay, replies.append)
            reply = next((r for r in replies if r.get("id") == REPLAY_ID), None)
            if reply is None or "result" not in reply:
                why = (reply or {}).get("error", {}).get("message", "no reply")
                raise self.unreachable(f"initialize was refused: {why}")
            self._took(reply)
            await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
            self.start_listening(group)
            log.warning("connect: reconnected to %s", self.url)
            return True

    def start_listening(self, group: TaskGroup) -> None:
        if self.session_id:
            scope = anyio.CancelScope()
            if self._get_scope is not None:
                self._get_scope.cancel()
            self._get_scope = scope
            group.start_soon(self._listen, scope, self.generation)

    async def _listen(self, scope: anyio.CancelScope, generation: int) -> None:
        """Server-initiated messages (list changes, roots requests) on the GET stream."""
        headers = {**self._headers({}), "accept": "text/event-stream"}
        with scope:
            try:
                async with self.http.stream("GET", self.url, headers=headers) as response:
                    if response.status_code != 200:
                        return  # no GET stream (a stateless daemon): nothing to listen to
                    async for event in httpx2.EventSource(response, max_event_size=MAX_EVENT_BYTES):
                        message = _parse_event(event)
                        if message is not None:
                            self.emit(message)
            except (httpx2.TransportError, httpx2.SSEError) as exc:
                log.info("connect: the daemon's event stream ended: %s", _describe(exc))
                self.mark_lost(generation)

    async def close(self) -> None:
        """End our session at the daemon (best effort, bounded)."""
        if not self.session_id:
            return
        with anyio.move_on_after(2, shield=True):
            try:
                await self.http.delete(self.url, headers=self._headers({}))
            except Exception as exc:  # the daemon may be gone already
                log.debug("session close failed: %s", exc)


def _parse_event(event: Any) -> Message | None:
    """The JSON-RPC message in one SSE event (None for priming events and junk)."""
    if event.event != "message" or not event.data:
        return None
    try:
        message = json.loads(event.data)
    except ValueError:
        log.warning("connect: ignored an event that is not JSON")
        return None
    return message if isinstance(message, dict) else None


def error_reply(request_id: Any, text: str, method: str | None = None) -> Message:
    """A failure the client shows: ``isError`` for a tool call, else a JSON-RPC error."""
    if method == "tools/call":
        result = {"content": [{"type": "text", "text": text}], "isError": True}
        return {"jsonrpc": "2.0", "id": request_id, "result": result}
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": CONNECTION_CLOSED, "message": text},
    }
