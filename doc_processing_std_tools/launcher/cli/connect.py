"""``dpt-launch connect URL``: a stdio <-> streamable-HTTP bridge to one running daemon.

Stdio-only clients (Claude Desktop, Cursor) each spawn a command; pointing that
command at this bridge makes them all share one ``dpt-launch`` daemon, so one
process holds the lock, the popoto connection and the external children.

Why a message relay and not a FastMCP proxy: a proxy answers the client itself
and opens backend sessions of its own choosing (one per request unless made
stateful), forwarding server-to-client traffic (roots, list-changed
notifications) only while a request is in flight. Here the client's own
JSON-RPC messages go to the daemon unchanged over one HTTP session, so
everything the protocol carries reaches the other side: tools, prompts,
resources, notifications both ways, cancellation, roots, sampling, progress.

What the bridge adds: when the daemon is down, requests fail at once with an
error naming the URL and how to start it (``isError`` for tool calls); when it
comes back (a restarted daemon forgets our session), the client's
``initialize`` is replayed, the session continues, and the client is told its
lists may have changed. stdout carries only the protocol; logs go to stderr and
never contain the token.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.from_thread
import anyio.lowlevel
import httpx2
from anyio.streams.memory import MemoryObjectSendStream

from ..lines import read_lines
from .client_config import TOKEN_PLACEHOLDER
from .status import EXIT_OK, EXIT_USAGE, fail
from .upstream import (
    CONNECT_TIMEOUT,
    DaemonUnreachable,
    Message,
    SessionLost,
    Upstream,
    error_reply,
)

log = logging.getLogger("dpt-launch")

REPROBE_INTERVAL = 2.0  # while the daemon is down, try to reopen the session this often
LIST_CHANGED = {
    "tools": "notifications/tools/list_changed",
    "prompts": "notifications/prompts/list_changed",
    "resources": "notifications/resources/list_changed",
}


class Bridge:
    """Relays one stdio client's messages to the daemon and the daemon's back."""

    def __init__(self, url: str, http: httpx2.AsyncClient, out_fd: int = 1) -> None:
        self.out_fd = out_fd
        self.upstream = Upstream(url, http, self.emit)
        self.in_flight: dict[Any, tuple[anyio.CancelScope, bool]] = {}

    def emit(self, message: Message) -> None:
        """Write one message to the client (stdout is the protocol, nothing else)."""
        data = (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self.out_fd, view) :]

    async def run(self, lines: AsyncIterable[str]) -> None:
        try:
            async with anyio.create_task_group() as group:
                self.group = group
                group.start_soon(self._reprobe)
                async for line in lines:
                    if not line.strip():
                        continue
                    try:
                        message = json.loads(line)
                    except ValueError:
                        error = {"code": -32700, "message": "Parse error: a line that is not JSON"}
                        self.emit({"jsonrpc": "2.0", "id": None, "error": error})
                        continue
                    if isinstance(message, dict):  # batches are no longer part of MCP
                        await self._route(message)
                group.cancel_scope.cancel()  # stdin closed: the client is gone
        finally:
            await self.upstream.close()

    async def _route(self, message: Message) -> None:
        method = message.get("method")
        if method == "initialize" and "id" in message:
            await self._initialize(message)
        elif method is not None and "id" in message:
            scope = anyio.CancelScope()
            modern = self._is_modern(message)
            self.in_flight[message["id"]] = (scope, modern)
            self.group.start_soon(self._request, message, scope)
        elif method == "notifications/cancelled":
            await self._cancel(message)
        else:  # other notifications, and the client's replies to the daemon's requests
            try:
                await self.upstream.ensure_open(self.group)
                await self.upstream.post(message)
            except (DaemonUnreachable, SessionLost) as exc:
                log.info("dropped a message for the daemon: %s", exc)

    @staticmethod
    def _is_modern(message: Message) -> bool:
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        return isinstance(meta, dict) and "io.modelcontextprotocol/protocolVersion" in meta

    async def _initialize(self, message: Message) -> None:
        try:
            reply = await self.upstream.first_initialize(message)
        except DaemonUnreachable as exc:
            # Answer for the daemon so the client stays connected; tool calls say what
            # is wrong, and the client hears list_changed once the daemon is up.
            log.warning("connect: %s", exc)
            params = message.get("params") or {}
            reply = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "result": {
                    "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                    "capabilities": {kind: {"listChanged": True} for kind in LIST_CHANGED},
                    "serverInfo": {"name": "dpt-launch connect", "version": "0"},
                },
            }
            self.upstream.capabilities = reply["result"]["capabilities"]
        self.emit(reply)
        self.upstream.start_listening(self.group)

    async def _request(self, message: Message, scope: anyio.CancelScope) -> None:
        request_id, method = message["id"], message.get("method")
        try:
            with scope:
                for _ in range(2):
                    try:
                        if await self.upstream.ensure_open(self.group):
                            self._announce_changes()
                        await self.upstream.post(message)
                        return
                    except SessionLost as lost:
                        self.upstream.mark_lost(lost.generation)  # it restarted: reopen, resend
                self.emit(error_reply(request_id, "the daemon keeps dropping our session", method))
        except DaemonUnreachable as exc:
            self.emit(error_reply(request_id, str(exc), method))
        finally:
            self.in_flight.pop(request_id, None)

    async def _cancel(self, message: Message) -> None:
        params = message.get("params") or {}
        entry = self.in_flight.get(params.get("requestId"))
        if entry is None:
            return
        scope, modern = entry
        if not modern:  # the handshake era cancels with this notification; the modern one by
            with contextlib.suppress(DaemonUnreachable, SessionLost):  # closing the request's
                await self.upstream.post(message)  # stream, which cancelling its POST does
        scope.cancel()

    def _announce_changes(self) -> None:
        """After a reconnect the daemon may serve other tools: tell the client to re-list."""
        for kind, method in LIST_CHANGED.items():
            if isinstance(
                self.upstream.capabilities.get(kind), dict
            ) and self.upstream.capabilities[kind].get("listChanged"):
                self.emit({"jsonrpc": "2.0", "method": method})

    async def _reprobe(self) -> None:
        """While the daemon is down, reopen the session in the background so lists heal."""
        while True:
            await anyio.sleep(REPROBE_INTERVAL)
            if self.upstream.open or self.upstream.initialize is None:
                continue
            try:
                if await self.upstream.ensure_open(self.group):
                    self._announce_changes()
            except (DaemonUnreachable, SessionLost):
                pass


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="dpt-launch connect",
        description="Bridge this stdio client to a running dpt-launch daemon (streamable HTTP).",
    )
    parser.add_argument("url", help="the daemon's MCP URL, e.g. http://127.0.0.1:8765/mcp")
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        help="send 'Authorization: Bearer $VAR' (the token is read from this environment variable)",
    )
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help="the daemon's profile NAME (a client's limits, docs/clients.md): connects to URL/NAME",
    )
    return parser.parse_args(argv)


def profile_url(url: str, profile: str | None) -> str:
    """*url* with the profile's path segment appended (``/mcp`` -> ``/mcp/cursor``)."""
    if not profile:
        return url
    parts = urlsplit(url)
    return parts._replace(path=f"{parts.path.rstrip('/')}/{profile}").geturl()


def connect(args: argparse.Namespace) -> int:
    """Serve the bridge on stdin/stdout until EOF, SIGINT or SIGTERM."""
    parts = urlsplit(args.url)
    if args.profile and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$", args.profile):
        return fail(
            f"--profile {args.profile[:100]!r}: a profile name is letters, digits, '_' and '-'",
            EXIT_USAGE,
            "dpt-launch connect",
        )
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return fail(
            f"{args.url!r} is not an http(s) URL (e.g. http://127.0.0.1:8765/mcp)",
            EXIT_USAGE,
            "dpt-launch connect",
        )
    headers: dict[str, str] = {}
    if args.token_env:
        token = os.environ.get(args.token_env, "")
        if not token.strip():
            return fail(
                f"--token-env {args.token_env}: that environment variable is empty or not set",
                EXIT_USAGE,
                "dpt-launch connect",
            )
        if token.strip() == TOKEN_PLACEHOLDER:
            return fail(
                f"--token-env {args.token_env}: it holds the placeholder client-config wrote; "
                "put the daemon's token in place of it in the client's config (its env block)",
                EXIT_USAGE,
                "dpt-launch connect",
            )
        headers["authorization"] = f"Bearer {token.strip()}"
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(_serve, profile_url(args.url, args.profile), headers)
    return EXIT_OK


async def _serve(url: str, headers: dict[str, str]) -> None:
    timeout = httpx2.Timeout(30.0, connect=CONNECT_TIMEOUT, read=None)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        anyio.create_task_group() as group,
    ):
        group.start_soon(_stop_on_signal, group.cancel_scope)
        log.info("connect: relaying stdio to %s", url)
        await Bridge(url, http).run(StdinLines(sys.stdin.fileno()))
        group.cancel_scope.cancel()


class StdinLines:
    """Lines of a file descriptor, read by a daemon thread and handed to the event loop.

    A blocked read in a daemon thread neither delays cancellation nor keeps the
    process alive at exit. Reads use ``os.read`` on the raw descriptor: a daemon
    thread blocked inside a buffered file object would abort interpreter shutdown.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __aiter__(self) -> AsyncIterator[str]:
        send, receive = anyio.create_memory_object_stream[str](16)
        token = anyio.lowlevel.current_token()
        threading.Thread(
            target=self._pump, args=(send, token), name="dpt-launch stdin", daemon=True
        ).start()
        return receive.__aiter__()

    def _pump(self, send: MemoryObjectSendStream[str], token: object) -> None:
        try:
            for line in read_lines(self._fd):
                anyio.from_thread.run(send.send, line.decode("utf-8", "replace"), token=token)  # type: ignore[arg-type]
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError, OSError):
            return  # the server stopped reading, the event loop is gone, or stdin broke
        finally:
            with suppress(RuntimeError):
                anyio.from_thread.run_sync(send.close, token=token)  # type: ignore[arg-type]


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            scope.cancel()
            return
