"""Profiles: the composed catalog as one client can take it (docs/clients.md).

A profile cuts the composition's exposed tools to what one client accepts: globs on exposed
names, a readable deterministic shortening of long names (and, if asked, of characters OpenAI
and Copilot refuse), short descriptions, and past ``max_tools`` a search mode where the client
sees the pinned tools plus ``search_tools`` and ``call_tool``. It changes names and lists only:
every call still goes down the composition's one path (:class:`ProfileGate` rewrites a call's
name and hands it on), so the process lock, timeouts, the servers' filters and errors hold.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any

from ..config.schema import LauncherConfig, ProfileConfig
from ..transports.http import PROFILE_SCOPE_KEY as SCOPE_KEY

log = logging.getLogger("dpt-launch")

SEARCH_TOOL = "search_tools"
CALL_TOOL = "call_tool"
DEFAULT_SERVER_NAME = "dpt"  # client-config's default --name: the client's key for us
DEFAULT_SEARCH_RESULTS = 5
HASH_CHARS = 6
_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]")
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


class ProfileError(Exception):
    """A profile cannot be served as configured (unknown, a name collision, too many tools)."""


@dataclass(frozen=True)
class Profile:
    """One profile with every field settled (built-in, then the config's fields over it)."""

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
    return list(dict.fromkeys([*BUILTIN, *config.profiles]))


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


# -- names -----------------------------------------------------------------------------


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


# -- serving -----------------------------------------------------------------------------


class ProfileGate:
    """The first middleware of the composed server's SDK server: each connection's profile.

    ``tools/list`` is cut and renamed per the connection's profile (over HTTP the path's,
    ``/mcp/NAME``; else the launch's ``--profile``); ``tools/call`` of a shown name is
    rewritten to the composition's name and handed on, so it takes the same path as any call.
    ``search_tools`` ranks the profile's whole catalog; ``call_tool`` calls any tool of it.
    A tool the profile leaves out answers as an unknown tool does.
    """

    def __init__(
        self, composition: Any, profiles: Mapping[str, Profile], default: str | None
    ) -> None:
        self.composition = composition
        self.profiles = dict(profiles)
        self.default = default
        self._maps: dict[str, tuple[Any, tuple[str, ...], NameMap]] = {}

    def served(self) -> list[str]:
        """The profiles a connection can name (``/mcp/NAME``)."""
        return [name for name in self.profiles if name != PLAIN]

    def composition_names(self) -> tuple[str, ...]:
        return tuple(t.name for m in self.composition.mounts for t in m.tools)

    def names(self, profile: str) -> NameMap:
        """The profile's :class:`NameMap` for the composition's current names (cached)."""
        mounts = self.composition.mounts
        cached = self._maps.get(profile)
        if cached is not None and cached[0] is mounts:  # (a refresh or reload swaps the list)
            return cached[2]
        current = self.composition_names()
        if cached is not None and cached[1] == current:
            self._maps[profile] = (mounts, current, cached[2])
            return cached[2]
        names = NameMap.build(self.profiles[profile], current)
        for kept, left, client in names.collisions:
            log.warning(
                "%s: tool %r is not shown: %r is already shown as %r",
                f"profiles.{profile}" if profile != PLAIN else "names clients take",
                left,
                kept,
                client,
            )
        self._maps[profile] = (mounts, current, names)
        return names

    def profile_of(self, ctx: Any) -> str | None:
        request = getattr(ctx, "request", None)
        scope = getattr(request, "scope", None)
        if isinstance(scope, Mapping) and scope.get(SCOPE_KEY):
            return str(scope[SCOPE_KEY])
        return self.default

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method not in ("tools/list", "tools/call"):
            return await call_next(ctx)
        profile = self.profile_of(ctx)
        if profile is None or profile not in self.profiles:
            return await call_next(ctx)
        names = self.names(profile)
        if ctx.method == "tools/list":
            return await self._list(ctx, call_next, names)
        params = ctx.params
        if not isinstance(params, Mapping) or not isinstance(params.get("name"), str):
            return await call_next(ctx)
        name = params["name"]
        if names.searching() and name == SEARCH_TOOL:
            return await self._search(ctx, call_next, names, params.get("arguments") or {})
        if names.searching() and name == CALL_TOOL:
            arguments = params.get("arguments") or {}
            target = arguments.get("name") if isinstance(arguments, Mapping) else None
            inner = arguments.get("arguments") if isinstance(arguments, Mapping) else None
            if not isinstance(target, str) or not isinstance(inner, Mapping | None):
                return _tool_error(
                    ctx,
                    f"{CALL_TOOL} needs 'name' (a tool's name from {SEARCH_TOOL}) and "
                    "'arguments' (an object)",
                    self.composition.root,
                )
            params = {**params, "name": target, "arguments": dict(inner or {})}
            name = target
        own = names.back.get(name)
        if own is None:
            # Not one of this profile's tools: the composition answers as for any unknown name
            # (a name the profile leaves out is asked for under a name no tool has).
            if name not in set(self.composition_names()):
                return await call_next(replace(ctx, params={**params, "name": name}))
            return _renamed(await call_next(replace(ctx, params={**params, "name": UNKNOWN})), name)
        return await call_next(replace(ctx, params={**params, "name": own}))

    async def _catalog(self, ctx: Any, call_next: Any) -> list[dict[str, Any]]:
        params = {"_meta": ctx.params["_meta"]} if "_meta" in (ctx.params or {}) else {}
        listing = await call_next(replace(ctx, method="tools/list", params=params))
        tools = listing.get("tools", []) if isinstance(listing, Mapping) else []
        return [t for t in tools if isinstance(t, Mapping)]  # type: ignore[misc]

    async def _list(self, ctx: Any, call_next: Any, names: NameMap) -> Any:
        listing = await call_next(ctx)
        if not isinstance(listing, Mapping):
            return listing
        tools = {t["name"]: t for t in listing.get("tools", []) if isinstance(t, Mapping)}
        shown = [shown_tool(tools[n], names) for n in names.listed() if n in tools]
        if names.searching():
            shown += [search_tool_definition(names.profile), call_tool_definition()]
        return {**listing, "tools": shown}

    async def _search(self, ctx: Any, call_next: Any, names: NameMap, arguments: Any) -> Any:
        from .tool_search import search_catalog

        query = arguments.get("query") if isinstance(arguments, Mapping) else None
        if not isinstance(query, str) or not query.strip():
            return _tool_error(
                ctx, f"{SEARCH_TOOL} needs 'query': what the tool should do", self.composition.root
            )
        limit = arguments.get("limit", names.profile.search_results)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 50:
            return _tool_error(
                ctx, "'limit' must be a whole number from 1 to 50", self.composition.root
            )
        catalog = [
            shown_tool(t, names)
            for t in await self._catalog(ctx, call_next)
            if t["name"] in names.shown
        ]
        found = search_catalog(catalog, query, limit)
        by_name = {t["name"]: t for t in catalog}
        tools = [by_name[n] for n in found]
        text = json.dumps(tools, ensure_ascii=False) if tools else "No tools matched the query."
        return _as_sent(
            ctx,
            {
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"tools": tools},
                "isError": False,
            },
            self.composition.root,
        )


UNKNOWN = "\x00"  # no tool's name (the composition refuses names the MCP spec does not allow)


def _renamed(result: Any, name: str) -> Any:
    """The composition's answer for an unknown tool, naming *name* instead of :data:`UNKNOWN`."""
    if isinstance(result, Mapping) and isinstance(result.get("content"), list):
        content = [
            {**b, "text": b["text"].replace(repr(UNKNOWN), repr(name))}
            if isinstance(b, Mapping) and isinstance(b.get("text"), str)
            else b
            for b in result["content"]
        ]
        return {**result, "content": content}
    return result


def _as_sent(ctx: Any, result: dict[str, Any], root: Any) -> dict[str, Any]:
    """*result* of ``tools/call`` shaped for the connection's protocol version, as the SDK
    shapes a handler's (a middleware that answers alone owns the envelope): checked against
    the version's schema and, on a 2026-era connection, ``resultType`` and the ``serverInfo``
    stamp."""
    from mcp_types import SERVER_INFO_META_KEY
    from mcp_types.methods import serialize_server_result

    modern = _modern(ctx.protocol_version)
    if modern:
        result = {"resultType": "complete", **result}
    shaped = serialize_server_result("tools/call", ctx.protocol_version, result)
    if modern:
        from ...seams.fastmcp_server import low_level_server

        stamp = low_level_server(root).server_info_stamp
        shaped["_meta"] = {**(shaped.get("_meta") or {}), SERVER_INFO_META_KEY: stamp}
    return shaped


def _modern(version: str) -> bool:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    return version not in HANDSHAKE_PROTOCOL_VERSIONS


def _tool_error(ctx: Any, text: str, root: Any) -> dict[str, Any]:
    return _as_sent(ctx, {"content": [{"type": "text", "text": text}], "isError": True}, root)


def gate_of(root: Any) -> ProfileGate | None:
    from ...seams.fastmcp_server import low_level_server

    for middleware in getattr(low_level_server(root), "middleware", ()):
        if isinstance(middleware, ProfileGate):
            return middleware
    return None


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
    from .exposure import own_name_of, suggested_namespace

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


def install_profiles(
    composition: Any, served: Sequence[str], default: str | None
) -> ProfileGate | None:
    """Serve *served* profiles (and *default* for connections that name none; without it, the
    plain rule when a name needs it) from *composition*: checked now against its tools (a
    collision or an over-long list refuses the launch with the fix), then put first in its
    SDK server's chain. None when there is nothing to serve: no profile, every name fine."""
    from ...seams.fastmcp_server import add_server_middleware

    config = composition.loaded.config
    wanted = list(dict.fromkeys([*served, *([default] if default else [])]))
    profiles = {name: resolve(config, name) for name in wanted}
    composition.on_tools_changed = follow_names
    if default is None:
        problems = plain_problems(composition.mounts)
        if problems:
            raise ProfileError(problems[0])
        if plain_names(t.name for m in composition.mounts for t in m.tools) is not None:
            profiles[PLAIN], default = PLAIN_RULE, PLAIN
    if not profiles:
        return None
    gate = ProfileGate(composition, profiles, default)
    problems = [text for name in wanted for text in gate.names(name).problems()]
    if problems:
        raise ProfileError(problems[0])
    add_server_middleware(composition.root, gate)
    if default is not None:
        _profile_fast_path(composition.root, gate, default)
    return gate


def follow_names(composition: Any) -> None:
    """The composition's tools changed while serving (a ``list_changed``, a reload): a name
    clients would not take, on connections that name no profile, brings in the plain rule
    from now on (a later tool whose name it would share is left out, with a warning)."""
    from ...seams.fastmcp_server import add_server_middleware

    gate = gate_of(composition.root)
    if gate is not None and gate.default is not None:
        return
    if plain_names(t.name for m in composition.mounts for t in m.tools) is None:
        return
    if gate is None:
        gate = ProfileGate(composition, {PLAIN: PLAIN_RULE}, PLAIN)
        add_server_middleware(composition.root, gate)
    else:
        gate.profiles[PLAIN], gate.default = PLAIN_RULE, PLAIN
    gate.names(PLAIN)
    _profile_fast_path(composition.root, gate, PLAIN)


class _ProfiledTargets:
    """The stdio fast path's table under a profile: the shown names, the tools it admits."""

    def __init__(self, relay: Any, gate: ProfileGate, profile: str) -> None:
        self._relay, self._gate, self._profile = relay, gate, profile
        self._seen: tuple[Any, Any] = (None, None)
        self._table: dict[str, Any] = {}

    def fast_targets(self) -> dict[str, Any]:
        """Asked per call: rebuilt only when the relay's table or the profile's names change."""
        base = self._relay.fast_targets()
        names = self._gate.names(self._profile)
        if self._seen[0] is not base or self._seen[1] is not names:
            back = names.back
            self._table = {shown: base[own] for shown, own in back.items() if own in base}
            self._seen = (base, names)
        return self._table


def _profile_fast_path(root: Any, gate: ProfileGate, profile: str) -> None:
    """Over stdio the fast path serves calls before any middleware: give it the profile's names."""
    from ...seams.fastmcp_server import low_level_server
    from ..external.fast_path import FastPath
    from ..external.relay import ToolRelay

    for middleware in getattr(low_level_server(root), "middleware", ()):
        if isinstance(middleware, ToolRelay):
            middleware.fast = FastPath(_ProfiledTargets(middleware, gate, profile))
