"""Names and tool definitions as a profile's client sees them: the shortening and mapping of
names (:class:`NameMap`), short descriptions, search mode's two tools, and the collisions a
profile, or the plain rule of a connection naming none, would cause."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from .exposure import own_name_of, suggested_namespace
from .profiles import (
    CALL_TOOL,
    CLIENT_NAME,
    PLAIN_RULE,
    SEARCH_TOOL,
    Profile,
    ProfileError,
    resolve,
)

HASH_CHARS = 6  # of a shortened name's hash
_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]")


def short_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:HASH_CHARS]


def exposed_name(name: str, profile: Profile) -> str:
    """*name* as *profile*'s client sees it: characters mapped (if asked), then shortened.

    Deterministic (the same name always gives the same result, on any machine) and readable:
    a name that fits is kept; a longer one keeps the start of its namespace (the part before
    the first ``_``) and as much of the tool's own name as fits, joined by a 6-character hash
    of the whole name, so that two long names that share their start stay apart.
    """
    shown = _OUTSIDE.sub("_", name) if profile.map_chars else name
    budget = profile.name_budget
    if budget is None or len(shown) <= budget:
        return shown
    tag = short_hash(name)
    namespace, sep, own = shown.partition("_")
    room = budget - len(tag) - 2  # two joiners
    if not sep or not namespace or room < 6:
        return f"{shown[: budget - len(tag) - 1]}_{tag}"
    head = min(len(namespace), max(2, room - len(own)))
    return f"{namespace[:head]}_{tag}_{own[: room - head]}"


@dataclass(frozen=True)
class NameMap:
    """The composition's exposed names as *profile* shows them.

    ``shown`` maps each admitted name to what the client sees; ``collisions`` lists the names
    two composition names would share (the later one is left out).
    """

    profile: Profile
    shown: dict[str, str] = field(default_factory=dict)  # composition name -> client's name
    back: dict[str, str] = field(default_factory=dict)  # client's name -> composition name
    collisions: tuple[tuple[str, str, str], ...] = ()  # (kept, left out, shared name)

    @classmethod
    def build(cls, profile: Profile, names: Iterable[str]) -> NameMap:
        """Names kept as they are claim them first: a renamed tool never takes an unchanged
        one's name, whatever the catalog order; ``shown`` keeps the catalog order."""
        wanted = {name: exposed_name(name, profile) for name in names if profile.admits(name)}
        back: dict[str, str] = {}
        collisions = []
        for name in sorted(wanted, key=lambda n: wanted[n] != n):
            client = wanted[name]
            if client in back or (client in (SEARCH_TOOL, CALL_TOOL) and profile.search != "off"):
                collisions.append((back.get(client, client), name, client))
                continue
            back[client] = name
        shown = {name: client for name, client in wanted.items() if back.get(client) == name}
        return cls(profile, shown, {c: n for n, c in shown.items()}, tuple(collisions))

    def searching(self) -> bool:
        """Whether the client is shown the search and call tools instead of the whole list."""
        p = self.profile
        over = p.max_tools is not None and len(self.shown) > p.max_tools
        return p.search == "always" or (p.search == "auto" and over)

    def pinned(self) -> list[str]:
        """Composition names the profile pins (globs on exposed names), in catalog order."""
        return [n for n in self.shown if any(fnmatchcase(n, g) for g in self.profile.pin)]

    def listed(self) -> list[str]:
        """Composition names listed to the client, in catalog order."""
        if self.searching():
            return self.pinned()
        names = list(self.shown)
        limit = self.profile.max_tools
        if limit is not None and len(names) > limit:  # search: off, grown past it while serving
            pins = self.pinned()
            rest = [n for n in names if n not in pins]
            keep = set(pins + rest[: max(0, limit - len(pins))])
            names = [n for n in names if n in keep]
        return names

    def problems(self) -> list[str]:
        """Why this profile cannot be served as the launch found it, each with the fix."""
        p = self.profile
        found = []
        for kept, left, client in self.collisions:
            if kept == client:
                found.append(
                    f"profiles.{p.name}: tool {left!r} would be shown as {client!r}, the name of "
                    f"the profile's own search tool; leave it out (profiles.{p.name}.exclude: "
                    f"[{left}]) or set profiles.{p.name}.search: off"
                )
                continue
            found.append(
                f"profiles.{p.name}: tools {kept!r} and {left!r} would both be shown as "
                f"{client!r}; give one server a shorter namespace, leave one out "
                f"(profiles.{p.name}.exclude: [{left}]) or raise profiles.{p.name}.max_name_length"
            )
        if p.max_tools is not None and p.search == "off" and len(self.shown) > p.max_tools:
            found.append(
                f"profiles.{p.name}: {len(self.shown)} tools, over its max_tools "
                f"({p.max_tools}), and search is off; set profiles.{p.name}.search: auto, or "
                f"narrow it (profiles.{p.name}.include / exclude)"
            )
        if self.searching():
            pins = self.pinned()
            if p.max_tools is not None and len(pins) + 2 > p.max_tools:
                found.append(
                    f"profiles.{p.name}: {len(pins)} pinned tools and the search and call tools "
                    f"are over its max_tools ({p.max_tools}); pin fewer"
                )
        return found


def short_description(text: str) -> str:
    """The first paragraph, cut to its first sentence when that is shorter."""
    paragraph = text.strip().split("\n\n", 1)[0].strip()
    match = re.match(r"(.+?[.!?])(\s|$)", paragraph, re.S)
    return " ".join((match.group(1) if match else paragraph).split())


def shown_tool(tool: Mapping[str, Any], names: NameMap) -> dict[str, Any]:
    """*tool* (a ``tools/list`` entry) as the client of *names* sees it."""
    out = dict(tool)
    out["name"] = names.shown[tool["name"]]
    if names.profile.descriptions == "short" and isinstance(out.get("description"), str):
        out["description"] = short_description(out["description"])
    return out


def search_tool_definition(profile: Profile) -> dict[str, Any]:
    return {
        "name": SEARCH_TOOL,
        "description": (
            "Find tools of this server that are not listed: give what you want to do in a few "
            "words. Returns the best-matching tools' full definitions (name, description, "
            f"input schema); call one with {CALL_TOOL}."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what the tool should do"},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 50,
                    "default": profile.search_results,
                    "description": "how many tools to return at most",
                },
            },
            "required": ["query"],
        },
        "annotations": {"readOnlyHint": True},
    }


def call_tool_definition() -> dict[str, Any]:
    return {
        "name": CALL_TOOL,
        "description": (
            f"Call a tool found with {SEARCH_TOOL} by its name, with its arguments. It runs as "
            "if called directly: the same checks, limits and result."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": f"the tool's name from {SEARCH_TOOL}"},
                "arguments": {"type": "object", "description": "its arguments"},
            },
            "required": ["name"],
        },
    }


def profile_problems(composition: Any, names: Sequence[str]) -> list[tuple[str, str]]:
    """``(profile, why)`` for each of *names* that *composition* cannot serve (``--check``)."""
    config = composition.loaded.config
    tools = [t.name for m in composition.mounts for t in m.tools]
    found = []
    for name in names:
        try:
            problems = NameMap.build(resolve(config, name), tools).problems()
        except ProfileError as exc:
            problems = [str(exc)]
        found += [(name, text) for text in problems]
    return found


def plain_names(names: Iterable[str]) -> NameMap | None:
    """*names* as a connection that names no profile sees them (:data:`PLAIN_RULE`), or None
    when every one is already a name every client takes: then nothing is installed and no
    call does any more work than before."""
    names = list(names)
    if all(CLIENT_NAME.match(name) for name in names):
        return None
    return NameMap.build(PLAIN_RULE, names)


def plain_problems(mounts: Sequence[Any], fresh: set[str] | None = None) -> list[str]:
    """Each pair of tools the plain rule would show under one name, with the fix (with
    *fresh*, a reload's new servers, only pairs involving one of them)."""
    names = plain_names(t.name for m in mounts for t in m.tools)
    if names is None:
        return []
    owner = {t.name: m for m in reversed(mounts) for t in m.tools}
    found = []
    for kept, left, client in names.collisions:
        mount = owner[left]
        if fresh is not None and not {mount.name, owner[kept].name} & fresh:
            continue
        namespace = (
            f"give one server a namespace (e.g. servers.{mount.name}.namespace: "
            f"{suggested_namespace(mount.name)}) or "
            if owner[kept] is not mount
            else ""
        )
        found.append(
            f"tool {left[:200]!r} of {mount.name!r} would be shown to clients as {client!r}, "
            f"the name of {kept!r} of {owner[kept].name!r} (clients take letters, digits, '_' "
            f"and '-', at most 64 characters); {namespace}leave the tool out "
            f"(servers.{mount.name}.tools.exclude: [{own_name_of(mount, left)[:200]}])"
        )
    return found
