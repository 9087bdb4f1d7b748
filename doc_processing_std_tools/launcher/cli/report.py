"""The ``--check`` report: what would be served, as rich tables."""

from __future__ import annotations

import re

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..calls.pins import shown
from ..compose.composition import Composition
from ..config.schema import LoadedConfig
from ..config.transport import TransportConfig
from .status import table_width


def _hints(tool: object) -> str:
    annotations = getattr(tool, "annotations", None)
    if annotations is None:
        return ""
    flags = []
    if annotations.read_only_hint:
        flags.append("read-only")
    if annotations.destructive_hint:
        flags.append("destructive")
    if annotations.idempotent_hint:
        flags.append("idempotent")
    return ", ".join(flags)


def _summary(description: str | None) -> str:
    """The first sentence of a tool description."""
    text = " ".join((description or "").split())
    return re.split(r"(?<=\.)\s", text, maxsplit=1)[0]


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def print_check(
    loaded: LoadedConfig,
    composition: Composition,
    transport: TransportConfig,
    findings: list[tuple[str, str, str]],
) -> None:
    """The tables, then one line per finding, then ``OK`` only when every server will serve."""
    console = Console(highlight=False, width=table_width())
    where = (
        "stdio"
        if transport.type == "stdio"
        else f"http://{transport.host}:{transport.port}{transport.path}"
    )
    console.print(f"[bold]{loaded.config.name}[/bold] from {loaded.path} - transport: {where}")

    servers = Table(title="Mounted servers", title_justify="left")
    servers.add_column("mount", overflow="fold")
    servers.add_column("server", overflow="fold")
    servers.add_column("namespace", overflow="fold")
    servers.add_column("tools", justify="right", no_wrap=True)
    servers.add_column("settings", overflow="fold", ratio=1)
    for mount in composition.mounts:
        details = "\n".join(f"{label}: {value}" for label, value in mount.describe())
        servers.add_row(
            escape(mount.name),
            escape(mount.label),
            escape(mount.entry.namespace or "-"),
            str(len(mount.tools)),
            escape(details or "-"),
        )
    for name, why in composition.skipped:
        servers.add_row(escape(name), "[yellow]not mounted[/yellow]", "-", "0", escape(why))
    for name, entry in loaded.config.servers.items():
        if not entry.enabled:
            label = entry.module or entry.server or name
            servers.add_row(escape(name), escape(label), "-", "0", "[dim]disabled[/dim]")
    console.print(servers)

    tools = Table(title="Tools", title_justify="left")
    tools.add_column("tool", style="bold", no_wrap=True)
    tools.add_column("mount", no_wrap=True)
    tools.add_column("hints", overflow="fold")
    tools.add_column("description", overflow="fold", ratio=1)
    for mount in composition.mounts:
        for tool in mount.tools:
            tools.add_row(
                escape(tool.name),
                escape(mount.name),
                _hints(tool),
                escape(shown(_summary(tool.description))),  # (hidden characters made visible)
            )
    console.print(tools)
    for name, level, text in findings:
        style = "red" if level == "FAIL" else "yellow"
        # (a finding that is no server's, the fleet lock's or a profile's, names itself)
        where = f"servers.{escape(name)}: " if name in loaded.config.servers else ""
        console.print(f"[{style}]{level}[/{style}] {where}{escape(text)}")
    counts = (
        f"{plural(composition.tool_count, 'tool')} from {plural(len(composition.mounts), 'server')}"
    )
    failed = [name for name, level, _ in findings if level == "FAIL"]
    if failed:
        console.print(
            f"[red]FAIL[/red]: {counts}; {_what_failed(failed, loaded)} cannot work as configured."
        )
    else:
        console.print(f"OK: {counts}, no name collisions.")


def _what_failed(names: list[str], loaded: LoadedConfig) -> str:
    """The summary names what the FAIL lines are about (a misspelt ``--profile`` is no
    server's fault)."""
    kinds = dict.fromkeys(
        "a server above"
        if name in loaded.config.servers
        else "a profile above"
        if name.startswith("profiles.")
        else "the fleet lock above"
        if name == "lock"
        else "a tool name above"
        for name in names
    )
    return " and ".join(kinds)
