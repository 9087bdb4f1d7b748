"""What a ``url:`` server sends, seen before the SDK's client session reads it.

The SDK's ``ClientSession`` validates each incoming notification against the methods it knows
and drops any other (a server's ``notifications/<vendor>/...``, ``notifications/tasks/status``)
before a handler could see it. fastmcp builds that session from its transport's read stream
through ``TransportOptions.session_class``; the transports here build it over a
:class:`TakenReads` instead, whose every message is first offered to the transport's ``take``.
Pinned by ``tests/seams/``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from types import TracebackType
from typing import Any

import anyio
from fastmcp.client.transports import SSETransport, StreamableHttpTransport
from fastmcp.client.transports.base import TransportOptions

# Given one message of the server's (a SessionMessage, or the Exception the stream carries),
# whether it was used up (then the session never sees it).
Take = Callable[[Any], Awaitable[bool]]


class TakenReads:
    """A session's read stream (the SDK's ``ReadStream``) whose messages are offered to *take*
    first; those it takes never reach the session."""

    def __init__(self, inner: Any, take: Take) -> None:
        self._inner = inner
        self._take = take

    async def receive(self) -> Any:
        while True:
            message = await self._inner.receive()
            if not await self._take(message):
                return message

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> TakenReads:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> TakenReads:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:  # (``last_context``, read by the SDK's dispatcher)
        return getattr(self._inner, name)


class _Taking:
    """A fastmcp HTTP transport whose sessions read through :class:`TakenReads`; ``take`` may
    be set (or changed) while the session runs."""

    take: Take | None = None

    async def _offer(self, message: Any) -> bool:
        take = self.take
        return take is not None and await take(message)

    @contextlib.asynccontextmanager
    async def connect_session(
        self, *, transport_options: TransportOptions | None = None, **session_kwargs: Any
    ) -> AsyncIterator[Any]:
        options = transport_options or TransportOptions()
        make = options.session_class

        def session(read: Any, write: Any, **kwargs: Any) -> Any:
            return make(TakenReads(read, self._offer), write, **kwargs)

        # (fastmcp only calls session_class(read, write, **kwargs): any callable serves)
        taking = replace(options, session_class=session)  # type: ignore[arg-type]
        async with super().connect_session(  # type: ignore[misc]
            transport_options=taking, **session_kwargs
        ) as opened:
            yield opened


class TakingStreamableHttp(_Taking, StreamableHttpTransport):
    """fastmcp's streamable HTTP transport, its messages offered to ``take`` first."""


class TakingSSE(_Taking, SSETransport):
    """fastmcp's SSE transport, its messages offered to ``take`` first."""
