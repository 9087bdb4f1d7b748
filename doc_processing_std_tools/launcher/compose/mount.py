"""``Mount``: one enabled server as the composition holds it, built, mounted and listed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...servers import ServerSpec
from ..config.schema import ServerEntry
from ..external.wording import shown_url

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.providers import Provider
    from fastmcp.tools import Tool

    from ..calls.policed_tools import PolicedListing
    from ..external.supervisor import Supervisor


@dataclass(frozen=True)
class Mount:
    """One enabled server, built and mounted."""

    name: str  # the key under servers:
    spec: ServerSpec | None  # None for an external (command/url) server
    entry: ServerEntry
    settings: Any
    server: FastMCP
    supervisor: Supervisor | None = None  # external servers: its session's keeper
    provider: Provider | None = None  # what was added to the root (set by mount_into)
    listing: Provider | None = None  # the same before the composition's ownership filter
    policing: PolicedListing | None = None  # the launcher's rules around its tools (in listing)
    tools: tuple[Tool, ...] = ()  # as exposed: namespace applied, lock wrapper included
    # every tool name it had at its first listing, with its namespace, those its rules or the
    # composition leave out too
    every_tool: frozenset[str] = frozenset()
    locked: frozenset[str] = frozenset()  # exposed names the launcher runs under the process lock
    prompts: tuple[str, ...] = ()  # prompt names as exposed
    resources: tuple[str, ...] = ()  # resource URIs and URI templates as exposed
    problems: tuple[tuple[str, str], ...] = ()  # its check(settings), run once before building
    late: bool = False  # an external server still starting when serving began: listed when up

    @property
    def state(self) -> str:
        """``up``, or an external server's ``starting`` / ``restarting`` / ``failed``."""
        return self.supervisor.state if self.supervisor is not None else "up"

    @property
    def label(self) -> str:
        """What the config names: the registered name, ``pkg.mod:attr``, the command or URL."""
        if self.spec is not None:
            return self.spec.name
        if self.entry.url:
            return shown_url(self.entry.url)
        return self.entry.command or self.name

    def describe(self) -> list[tuple[str, str]]:
        """Rows for ``--check``: the server's own ``describe(settings)``, if any; an external
        server's sessions (how clients map to them, what they share)."""
        if self.supervisor is not None:
            return [("sessions", self.supervisor.sessions_line())]
        return self.spec.rows(self.settings) if self.spec else []

    def findings(self) -> list[tuple[str, str]]:
        """``(level, text)`` pairs from the server's ``check(settings)``: FAIL or WARN (an
        UNAVAILABLE one skipped the server)."""
        return list(self.problems)
