"""The ``--check`` report: what would be served, as rich tables."""

from __future__ import annotations

import re

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .compose import Composition
from .config import LoadedConfig, TransportConfig


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


def print_check(loaded: LoadedConfig, composition: Composition, transport: TransportConfig) -> None:
    console = Console(highlight=False, width=max(120, Console().width))
    where = (
        "stdio"
        if transport.type == "stdio"
        else f"http://{transport.host}:{transport.port}{transport.path}"
    )
    console.print(f"[bold]{loaded.config.name}[/bold] from {loaded.path} - transport: {where}")

    servers = Table(title="Mounted servers", title_justify="left")
    servers.add_column("mount")
    servers.add_column("server")
    servers.add_column("namespace")
    servers.add_column("tools", justify="right")
    servers.add_column("settings")
    for mount in composition.mounts:
        details = "\n".join(f"{label}: {value}" for label, value in mount.describe())
        servers.add_row(
            escape(mount.name),
            escape(mount.source.label),
            escape(mount.entry.namespace or "-"),
            str(len(mount.tools)),
            escape(details or "-"),
        )
    for name, why in composition.skipped:
        servers.add_row(escape(name), "[yellow]not mounted[/yellow]", "-", "0", escape(why))
    console.print(servers)

    tools = Table(title="Tools", title_justify="left")
    tools.add_column("tool", style="bold", no_wrap=True)
    tools.add_column("mount", no_wrap=True)
    tools.add_column("hints")
    tools.add_column("description", overflow="fold")
    for mount in composition.mounts:
        for tool in mount.tools:
            tools.add_row(
                escape(tool.name),
                escape(mount.name),
                _hints(tool),
                escape(_summary(tool.description)),
            )
    console.print(tools)
    total = sum(len(m.tools) for m in composition.mounts)
    console.print(f"OK: {total} tools from {len(composition.mounts)} servers, no name collisions.")
