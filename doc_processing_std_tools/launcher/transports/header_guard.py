"""A connection-level guard for uvicorn: request headers must arrive in time, and connections
that have shown no valid token cannot crowd out those that have.

uvicorn's keep-alive timer only runs between requests and stops at the first byte, so a client
trickling its headers holds a connection (and a descriptor) for ever. This is done in the
protocol, because a client that never finishes its headers never reaches an ASGI middleware.

On uvicorn's httptools protocol (C parser) when httptools is installed, else on its h11 one
(pure Python: parsing and writing each request's headers took about 6% of the launcher's CPU
per relayed HTTP call, py-spy on ``benchmarks/peers.py``'s HTTP rows).
"""

from __future__ import annotations

import hmac
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .asgi import LOST_SCOPE_KEY, LostConnection
from .console.visitors import COOKIE

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools not installed: the h11 protocol only
    HttpToolsProtocol = None  # type: ignore[misc,assignment]
# h11 and uvicorn's h11 protocol only where they serve: 0.37 MB of the launcher's private
# memory (USS) that the httptools protocol never uses.
if HttpToolsProtocol is None or TYPE_CHECKING:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("dpt-launch")
CONSOLE_COOKIE = COOKIE.encode() + b"="


@dataclass
class HeaderLimits:
    """One server's limits, and the connections they count (shared by all its connections)."""

    timeout: float  # seconds to finish a request's headers, from connecting or the last response
    short: float  # the same for a connection that has shown no valid token yet
    accepted: list[bytes]  # ``Bearer <token>`` values that end pending; none: any request
    cookies: list[bytes]  # the console's sign-in cookie (``dpt_console=<token>``) does too
    max_pending: int | None  # pending connections kept open (a newer one closes the oldest)
    per_client: int | None  # open connections of one client address (429 beyond)
    pending: dict[Any, None] = field(default_factory=dict)  # oldest first
    per_address: Counter[str] = field(default_factory=Counter)

    def shows_token(self, headers: list[tuple[bytes, bytes]]) -> bool:
        if not self.accepted:
            return True
        given = next((value for name, value in headers if name == b"authorization"), b"")
        if any(hmac.compare_digest(given, token) for token in self.accepted):
            return True
        cookie = next((value for name, value in headers if name == b"cookie"), b"")
        return any(
            hmac.compare_digest(part.strip(), expected)
            for part in cookie.split(b";")
            if part.strip().startswith(CONSOLE_COOKIE)
            for expected in self.cookies
        )


class _HeaderTimer:
    """What both protocols share: the per-client count, the pending connections and the timer.
    A protocol calls :meth:`_headers_done` when a request's headers are complete and says, in
    :meth:`_awaiting_headers`, whether the connection is between requests."""

    limits: ClassVar[HeaderLimits]
    _header_timer: Any = None
    _address: str | None = None
    _pending = False
    client: Any
    transport: Any
    loop: Any

    # (a protocol class after this one in the bases: these run around its own)
    def connection_made(self, transport: Any) -> None:
        # who the request being served asked to tell when the connection is lost (the
        # httptools protocol puts it in each request's scope: :data:`.asgi.LOST_SCOPE_KEY`)
        self._lost = LostConnection()
        super().connection_made(transport)  # type: ignore[misc]
        self._admit(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        super().connection_lost(exc)  # type: ignore[misc]
        self._lost.lose()

    def _admit(self, transport: Any) -> bool:
        """Count a new connection; False (and a 429) when its client has too many open."""
        limits = self.limits
        address = self.client[0] if self.client else ""
        if limits.per_client is not None and limits.per_address[address] >= limits.per_client:
            log.info("refused a connection: %s has %d open", address, limits.per_client)
            transport.write(
                b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
            transport.close()
            return False
        self._address = address
        limits.per_address[address] += 1
        self._pending = True
        limits.pending[self] = None
        if limits.max_pending is not None:
            while len(limits.pending) > limits.max_pending:
                next(iter(limits.pending))._evict()
        self._arm()
        return True

    def _headers_done(self, headers: list[tuple[bytes, bytes]] | None) -> None:
        self._disarm()
        if self._pending and headers is not None and self.limits.shows_token(headers):
            self._pending = False
            self.limits.pending.pop(self, None)

    def _forget(self) -> None:
        self._disarm()
        limits = self.limits
        limits.pending.pop(self, None)
        if self._address is not None:
            limits.per_address[self._address] -= 1
            if limits.per_address[self._address] <= 0:
                del limits.per_address[self._address]
            self._address = None

    def _awaiting_headers(self) -> bool:
        raise NotImplementedError

    def _evict(self) -> None:
        self.limits.pending.pop(self, None)
        self._disarm()
        log.info("closed the oldest connection that had shown no token (too many pending)")
        self.transport.close()

    def _wait(self) -> float:
        return self.limits.short if self._pending else self.limits.timeout

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self._wait(), self._expire)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expire(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing() and self._awaiting_headers():
            log.info("closed a connection that sent no request headers within %gs", self._wait())
            self.transport.close()


if HttpToolsProtocol is None or TYPE_CHECKING:

    class SlowHeaderGuard(_HeaderTimer, H11Protocol):
        """uvicorn's h11 protocol under :attr:`limits` (bound per server by
        :func:`slow_header_guard`)."""

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the headers are complete
                self._headers_done(self.headers)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm()

        def _awaiting_headers(self) -> bool:
            return self.conn.their_state is h11.IDLE


if HttpToolsProtocol is not None:

    class FastHeaderGuard(_HeaderTimer, HttpToolsProtocol):
        """uvicorn's httptools protocol under :attr:`limits`: the same guard on the C parser.

        A request counts from its complete headers to its complete response; with none open,
        the connection is between requests and its next headers are timed."""

        _open = 0  # requests whose headers are complete and whose response is not

        def on_headers_complete(self) -> None:
            self.scope[LOST_SCOPE_KEY] = self._lost  # type: ignore[literal-required]
            super().on_headers_complete()
            self._open += 1
            self._headers_done(self.headers)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._open = max(0, self._open - 1)
            if not self.transport.is_closing() and not self._open:
                self._arm()

        def _awaiting_headers(self) -> bool:
            return not self._open


def slow_header_guard(
    timeout: float,
    *,
    tokens: list[str] | None = None,
    pending_timeout: float | None = None,
    max_pending: int | None = None,
    per_client: int | None = None,
) -> type[_HeaderTimer]:
    """uvicorn's protocol (httptools' where installed, else h11's), closing connections that do
    not send request headers in time, and keeping connections that have not shown a valid token
    from crowding out those that have.

    Every connection gets *timeout* seconds, from connecting or from its previous response, to
    finish the next request's headers. A connection is *pending* until a request on it completes
    its headers with one of *tokens* (in ``Authorization``, or the console's cookie; any request
    when there are none): pending ones get *pending_timeout* seconds instead; at most
    *max_pending* stay open (a newer one closes the oldest, so a flood of them cannot take
    uvicorn's ``limit_concurrency`` from clients that authenticate), and one client address keeps
    at most *per_client* connections open (429 and close beyond). Each call gives its server
    counts of its own.
    """
    limits = HeaderLimits(
        timeout=timeout,
        short=min(timeout, pending_timeout) if pending_timeout is not None else timeout,
        accepted=[f"Bearer {token}".encode() for token in tokens or []],
        cookies=[f"{COOKIE}={token}".encode() for token in tokens or []],
        max_pending=max_pending,
        per_client=per_client,
    )
    base: type[_HeaderTimer] = SlowHeaderGuard if HttpToolsProtocol is None else FastHeaderGuard
    return type(base.__name__, (base,), {"limits": limits})
