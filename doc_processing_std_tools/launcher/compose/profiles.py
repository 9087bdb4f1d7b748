"""Profiles: the composed catalog as one client can take it (docs/clients.md).

A profile cuts the composition's exposed tools to what one client accepts: globs on exposed
names, a readable deterministic shortening of long names (and, if asked, of characters OpenAI
and Copilot refuse), short descriptions, and past ``max_tools`` a search mode where the client
sees the pinned tools plus ``search_tools`` and ``call_tool``. It changes names and lists only:
every call still goes down the composition's one path (``profile_gate.ProfileGate`` rewrites a
call's name and hands it on), so the process lock, timeouts, the servers' filters and errors hold.

This module holds what a profile is (the built-in ones, the config's over them);
``profile_names`` what its client sees, ``profile_gate`` serving it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from ..config.schema import LauncherConfig, ProfileConfig
from ..errors import LauncherError

SEARCH_TOOL = "search_tools"
CALL_TOOL = "call_tool"
DEFAULT_SERVER_NAME = "dpt"  # client-config's default --name: the client's key for us
DEFAULT_SEARCH_RESULTS = 5
# What every client takes (the OpenAI and Copilot APIs, Windsurf); the MCP spec allows more.
CLIENT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PLAIN = ""  # the gate's key for the rule of a connection that names no profile


# Each client's documented limits; sources in docs/clients.md. Every one of them refuses a
# name with a character outside [A-Za-z0-9_-] (a '.' the MCP spec allows): map_chars.
BUILTIN: dict[str, ProfileConfig] = {
    # The Claude API refuses a tool name over 64 characters (the whole session fails); Claude
    # Code sends MCP tools as mcp__<server>__<tool>, and defers them to its own tool search
    # once their definitions pass 10% of the context (20k tokens of a 200k window).
    "claude-code": ProfileConfig(
        max_name_length=64,
        name_prefix="mcp__{server}__",
        map_chars=True,
        max_tool_tokens=20_000,
        search="off",
    ),
    "claude-desktop": ProfileConfig(max_name_length=64, map_chars=True, search="off"),
    # Cursor: the first 40 tools reach the model; server name + tool name at most 60.
    "cursor": ProfileConfig(
        max_tools=40, max_name_length=60, name_prefix="{server}", map_chars=True, search="auto"
    ),
    # VS Code / Copilot: at most 128 tools per request; the Copilot API wants OpenAI names.
    "vscode": ProfileConfig(max_tools=128, max_name_length=64, map_chars=True, search="auto"),
    # Codex (OpenAI API): at most 128 functions, names ^[a-zA-Z0-9_-]{1,64}$, as mcp__<server>__<tool>.
    "codex": ProfileConfig(
        max_tools=128,
        max_name_length=64,
        name_prefix="mcp__{server}__",
        map_chars=True,
        search="auto",
    ),
    # Windsurf (Cascade): at most 100 tools at any time, names ^[a-zA-Z0-9_-]{1,64}$.
    "windsurf": ProfileConfig(max_tools=100, max_name_length=64, map_chars=True, search="auto"),
}


class ProfileError(LauncherError):
    """A profile cannot be served as configured (unknown, a name collision, too many tools)."""


@dataclass(frozen=True)
class Profile:
    """One profile with every field resolved (built-in, then the config's fields over it)."""

    name: str
    max_tools: int | None = None
    max_name_length: int | None = None
    name_prefix: str = ""
    server_name: str = DEFAULT_SERVER_NAME
    map_chars: bool = False
    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    pin: tuple[str, ...] = ()
    search: str = "auto"
    descriptions: str = "full"
    max_tool_tokens: int | None = None
    search_results: int = DEFAULT_SEARCH_RESULTS

    @property
    def prefix_length(self) -> int:
        """Characters the client adds before our tool name when it counts the limit."""
        return len(self.name_prefix.replace("{server}", self.server_name))

    @property
    def name_budget(self) -> int | None:
        """The longest exposed tool name the client accepts, or None."""
        if self.max_name_length is None:
            return None
        return max(8, self.max_name_length - self.prefix_length)

    def admits(self, name: str) -> bool:
        """Whether the composition's exposed *name* is in this profile (its include/exclude)."""
        return any(fnmatchcase(name, g) for g in self.include) and not any(
            fnmatchcase(name, g) for g in self.exclude
        )


def known_profiles(config: LauncherConfig) -> list[str]:
    """Every profile name a config may use: the built-in ones, then its own."""
    return config.profile_names()


def resolve(config: LauncherConfig, name: str) -> Profile:
    """Profile *name*: the built-in one of that name with the config's fields over it."""
    base = BUILTIN.get(name)
    own = config.profiles.get(name)
    if base is None and own is None:
        raise ProfileError(
            f"no profile {name[:100]!r}; known: {', '.join(known_profiles(config))} "
            "(add it under profiles: in the config)"
        )
    fields: dict[str, Any] = {}
    for source in (base, own):
        if source is not None:
            fields.update(source.model_dump(exclude_none=True, exclude_unset=source is own))
    for key in ("include", "exclude", "pin"):
        if key in fields:
            fields[key] = tuple(fields[key])
    return Profile(name=name, **fields)


# Without a profile: names every client takes, by the same shortening and mapping.
PLAIN_RULE = Profile(name=PLAIN, max_name_length=64, map_chars=True, search="off")
