"""Serving profiles: :class:`ProfileGate`, the first middleware of the composed server's SDK
server, cuts and renames each connection's ``tools/list`` and renames its calls back, and
answers search mode's ``search_tools``; the stdio fast path is given the profile's names."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from mcp_types import SERVER_INFO_META_KEY
from mcp_types.methods import serialize_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ...seams.fastmcp_server import add_server_middleware, low_level_server
from ..external.fast_path import FastPath
from ..external.relay import ToolRelay, relay_of
from ..transports.session_binding import PROFILE_SCOPE_KEY as SCOPE_KEY
from .profile_names import (
    NameMap,
    call_tool_definition,
    plain_names,
    plain_problems,
    search_tool_definition,
    shown_tool,
)
from .profiles import CALL_TOOL, PLAIN, PLAIN_RULE, SEARCH_TOOL, Profile, ProfileError, resolve
from .tool_search import search_catalog

log = logging.getLogger("dpt-launch")


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

    def shows_server(self, profile: str | None, server: str) -> bool:
        """Whether a connection to *profile*'s endpoint (None: the default) sees mount *server*:
        some tool of it is in the profile, or it has none (a profile cuts tools alone)."""
        name = profile or self.default
        if name is None or name not in self.profiles:
            return True
        mount = self.composition.owners().named.get(server)
        if mount is None or not mount.tools:
            return True
        shown = self.names(name).shown
        return any(t.name in shown for t in mount.tools)

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
            # Not one of this profile's tools: the composition answers as for any unknown name.
            # A name no tool has yet (an unlisted call, :mod:`.unlisted_calls`) goes on as it is
            # when the profile's include/exclude admit it; a name the profile leaves out is asked
            # for under a name no tool has, so nothing behind this gate serves it.
            if name not in set(self.composition_names()) and names.profile.admits(name):
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
    modern = _modern(ctx.protocol_version)
    if modern:
        result = {"resultType": "complete", **result}
    shaped = serialize_server_result("tools/call", ctx.protocol_version, result)
    if modern:
        stamp = low_level_server(root).server_info_stamp
        shaped["_meta"] = {**(shaped.get("_meta") or {}), SERVER_INFO_META_KEY: stamp}
    return shaped


def _modern(version: str) -> bool:
    return version not in HANDSHAKE_PROTOCOL_VERSIONS


def _tool_error(ctx: Any, text: str, root: Any) -> dict[str, Any]:
    return _as_sent(ctx, {"content": [{"type": "text", "text": text}], "isError": True}, root)


def gate_of(root: Any) -> ProfileGate | None:
    for middleware in getattr(low_level_server(root), "middleware", ()):
        if isinstance(middleware, ProfileGate):
            return middleware
    return None


def install_profiles(
    composition: Any, served: Sequence[str], default: str | None
) -> ProfileGate | None:
    """Serve *served* profiles (and *default* for connections that name none; without it, the
    plain rule when a name needs it) from *composition*: checked now against its tools (a
    collision or an over-long list refuses the launch with the fix), then put first in its
    SDK server's chain. None when there is nothing to serve: no profile, every name fine."""
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
    relay = relay_of(root)
    if relay is not None:
        relay.fast = FastPath(_ProfiledTargets(relay, gate, profile))


class HttpTables:
    """The HTTP fast path's table per endpoint (``transports/http_fast_path.py``): a profile's
    endpoint calls the profile's shown names, the tools it admits, as :class:`ProfileGate`
    decides for the SDK path (the path's profile, else the default); no profile, or one the
    gate does not serve, gets the relay's whole table, as the SDK path then passes every call
    on unchanged (the HTTP app has endpoints for served profiles only)."""

    def __init__(self, root: Any, relay: ToolRelay) -> None:
        self._root, self._relay = root, relay
        self._tables: dict[str, _ProfiledTargets] = {}
        self._taking: tuple[object, bool] = (None, False)

    def taking(self) -> bool:
        """Whether the fast path can take any call now: it serves only tools of ``command:``
        servers with ``sessions: per_client``. Asked per request; decided again once a reload
        or refresh swaps the mounts (and so the relay's targets)."""
        targets = self._relay.targets()
        if targets is not self._taking[0]:
            self._taking = (targets, any(map(_per_client_command, targets.values())))
        return self._taking[1]

    def __call__(self, profile: str | None) -> Mapping[str, Any]:
        gate = gate_of(self._root)  # (a reload may add the plain rule's gate)
        name = str(profile) if profile else (gate.default if gate is not None else None)
        if gate is None or name is None or name not in gate.profiles:
            return self._relay.fast_targets()
        table = self._tables.get(name)
        if table is None or table._gate is not gate:
            table = self._tables[name] = _ProfiledTargets(self._relay, gate, name)
        return table.fast_targets()


def _per_client_command(target: Any) -> bool:
    supervisor = target.supervisor
    if supervisor is None:
        return False
    entry = supervisor.entry
    return bool(entry.command) and entry.session_mode == "per_client"


def http_tables(root: Any) -> HttpTables | None:
    """:class:`HttpTables` of *root*'s relay; None when it relays nothing."""
    relay = relay_of(root)
    return HttpTables(root, relay) if relay is not None else None
