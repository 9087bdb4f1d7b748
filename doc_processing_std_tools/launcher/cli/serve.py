"""Serve a composition over stdio (launcher/transports/stdio.py) or streamable HTTP (launcher/transports/http.py)
until EOF, SIGINT or SIGTERM.

A signal cancels serving so every lifespan exits cleanly. A sync tool still running
in a worker thread cannot be cancelled, and the lifespans wait for it: if stopping
takes longer than ``shutdown_grace`` seconds, the process exits anyway (the kernel
drops its flocks; an embedded redis-server is stopped by its supervisor once no
launcher holds its lease; atomic writes leave the old or the new file).
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import socket
import sys
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

import anyio
from fastmcp.server.context import reset_transport, set_transport

from ...locking import fleet_lock_in_use
from ...seams.fastmcp_server import lifespan_manager, low_level_server
from ..compose.composition import Composition
from ..compose.pinning import served
from ..compose.profile_gate import gate_of, http_tables
from ..compose.reload import reload_now, watch
from ..compose.sessions import registry_of
from ..compose.tool_search import search_catalog
from ..config.transport import TransportConfig
from ..external.relay import fast_path_of
from ..transports.console import ConsoleSources
from ..transports.stdio import stdio_streams

if TYPE_CHECKING:
    from fastmcp import FastMCP

    from ..compose.profile_gate import HttpTables
    from ..external.client_requests import Fronts

log = logging.getLogger("dpt-launch")
STOP_MARGIN = 0.5  # seconds past shutdown_grace for lifespans that are exiting normally


async def serve(
    composition: Composition, transport: TransportConfig, listener: socket.socket | None = None
) -> None:
    """Serve until the client leaves or a signal arrives.

    For HTTP, *listener* is the socket :func:`bind` opened (bound here when not given);
    a signal drains in-flight calls (``shutdown_grace``). For stdio, a signal cancels
    serving so every lifespan exits cleanly.
    """
    root = composition.root
    count = composition.tool_count
    tools = f"{count} tool" if count == 1 else f"{count} tools"
    if transport.type == "http":
        # here, not at the top: ~14 ms of uvicorn's protocols, h11 and our ASGI middleware,
        # paid only over HTTP
        from ..transports.asgi import use_json_logs
        from ..transports.http import serve_http

        if transport.log_format == "json":
            use_json_logs()
        # Bound before serving, so the line names the real port (port 0 picks a free one).
        listener = listener or bind(transport.host, transport.port)
        port = listener.getsockname()[1]
        host = f"[{transport.host}]" if ":" in transport.host else transport.host
        _announce(f"serving {tools} on http://{host}:{port}{transport.path}", transport)
        metrics = None
        if composition.loaded.config.telemetry.metrics:  # (GET /metrics; none over stdio)
            metrics = composition.telemetry.enable_metrics()
            if metrics is not None:
                metrics.gauges.states = composition.external_states
                metrics.gauges.restarts = composition.external_restarts
                metrics.gauges.pools = composition.external_sessions
                metrics.gauges.early = composition.external_early
                metrics.gauges.pins_drifted = composition.pins.drifted
                fleet = fleet_lock_in_use()
                if fleet is not None:
                    metrics.gauges.fleet_lock_lost = lambda: fleet.lost_count
        async with anyio.create_task_group() as group:
            group.start_soon(watch, composition)  # SIGHUP (and --watch) reload the config
            await serve_http(
                composition.root,
                composition.server_states,
                transport,
                listener,
                metrics=metrics,
                profiles=_profiles(composition),
                access=composition.guards.access if composition.guards is not None else None,
                default_profile=_default_profile(composition),
                console=console_sources(composition) if transport.console else None,
                relayed=_relayed(composition),
            )  # stops itself on SIGTERM/SIGINT
            group.cancel_scope.cancel()
        return
    async with anyio.create_task_group() as group:
        group.start_soon(_stop_on_signal, group.cancel_scope, transport.shutdown_grace)
        group.start_soon(watch, composition)  # SIGHUP (and --watch) reload the config
        log.info("serving %s over stdio", tools)
        if sys.stdin.isatty():
            print(f"dpt-launch: {terminal_hint(composition, tools)}", file=sys.stderr, flush=True)
        # stdin's EOF ends serving too; a call that cannot be cancelled gets the same grace
        await run_stdio(root, on_eof=lambda: exit_after(transport.shutdown_grace))
        group.cancel_scope.cancel()  # the client went away: stop the signal watcher


def console_sources(composition: Composition) -> ConsoleSources:
    """What the console at ``/ui`` reads of *composition* (each read when a page asks)."""
    guards = composition.guards
    return ConsoleSources(
        states=composition.server_states,
        restarts=composition.external_restarts,
        last_errors=composition.last_errors,
        upstream_sessions=composition.upstream_sessions,
        tool_counts=lambda: {m.name: len(m.tools) for m in composition.mounts},
        audit=guards.audit if guards is not None else None,
        pins=composition.pins,
        served=lambda: served(composition),
        reload=lambda: reload_now(composition),
        entries=lambda: composition.loaded.config.servers,
        search=search_catalog,
        metrics=lambda: composition.telemetry.metrics,
    )


def _relayed(composition: Composition) -> tuple[Fronts, HttpTables, Callable[[], bool]] | None:
    """What the HTTP fast path needs: the client sessions, the tables of relayed tools, and
    whether it can take any call now."""
    registry = registry_of(composition.root)
    tables = http_tables(composition.root)
    if registry is None or tables is None:
        return None
    return registry.fronts, tables, tables.taking


def _profiles(composition: Composition) -> list[str]:
    """The profiles served at ``<path>/NAME`` (``compose/profile_gate.py``)."""
    gate = gate_of(composition.root)
    return gate.served() if gate is not None else []


def _default_profile(composition: Composition) -> str | None:
    """The profile a connection naming none is served (the launch's ``--profile``), or None."""
    gate = gate_of(composition.root)
    default = gate.default if gate is not None else None
    return default if default in (gate.served() if gate is not None else []) else None


def terminal_hint(composition: Composition, tools: str) -> str:
    """The line for a person who started the stdio server in a terminal (a client never sees
    it: its stdin is a pipe): what is served, and that a client should start it instead."""
    servers = len(composition.mounts)
    config = shlex.quote(str(composition.loaded.path))
    return (
        f"serving {tools} from {servers} server{'' if servers == 1 else 's'} over stdio: this "
        "process speaks MCP on stdin/stdout for a client that starts it; add it to one with "
        f"`dpt-launch client-config CLIENT --config {config}` (Ctrl-C to stop)"
    )


def _announce(line: str, transport: TransportConfig) -> None:
    """The one line a person starting an HTTP daemon wants to see: not a warning, always shown."""
    if transport.log_format == "json":
        log.warning(line)
    else:
        print(f"dpt-launch: {line}", file=sys.stderr, flush=True)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on *host*:*port*.

    The protocol is named (IPPROTO_TCP) so that asyncio sets TCP_NODELAY on accepted
    connections: with proto 0 it does not, and every reply written in two parts
    (headers, then body) waited ~40 ms for the client's delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(128)
    except OSError:
        listener.close()
        raise
    return listener


async def run_stdio(server: FastMCP, on_eof: Callable[[], None] | None = None) -> None:
    """``FastMCP.run_stdio_async`` on the launcher's own stdio transport (launcher/transports/stdio.py)."""
    token = set_transport("stdio")
    try:
        async with (
            lifespan_manager(server),
            stdio_streams(on_eof, fast_path_of(server)) as (
                read,
                write,
            ),
        ):
            low_level = low_level_server(server)
            await low_level.run(read, write, low_level.create_initialization_options())
    finally:
        reset_transport(token)


async def _stop_on_signal(scope: anyio.CancelScope, grace: float) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s, shutting down", signal.Signals(signum).name)
            exit_after(grace)
            scope.cancel()
            return


def exit_after(grace: float) -> None:
    """Exit the process in *grace* seconds (plus a flush margin) unless it has ended by then.

    Cancelling cannot stop a sync tool running in a worker thread; the lifespans (and
    interpreter exit, which joins those threads) would wait for it.
    """

    def give_up() -> None:
        log.warning(
            "a call still running after shutdown_grace (%g s): stopping without waiting for it",
            grace,
        )
        with suppress(Exception):
            sys.stderr.flush()
        os._exit(0)

    timer = threading.Timer(grace + STOP_MARGIN, give_up)
    timer.daemon = True
    timer.start()
