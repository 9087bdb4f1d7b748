"""Which server exposes each tool name, prompt name and resource URI: at most one, and a valid
MCP tool name. At launch two owners are an error (:func:`refuse_bad_names`); later the first owner
keeps the name (:class:`Exposure`)."""

from __future__ import annotations

import logging
import re
from dataclasses import replace

from ..errors import LauncherError
from .lock_policy import locked_names
from .mount import Mount

log = logging.getLogger("dpt-launch")
# The MCP spec's tool-name rule (2025-11-25); what clients see is narrower (profile_names.py).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
TOOL_NAME_RULE = "letters, digits, '_', '-' and '.', at most 128 characters (the MCP spec)"


class CompositionError(LauncherError):
    """The servers cannot be served together (e.g. a tool-name collision)."""


class Exposure:
    """Which server exposes each tool name, prompt name and resource URI: at most one.

    A name belongs to the server that had it first: at launch (where two owners are an
    error, :func:`refuse_bad_names`), or when a server lists a name nobody has. A server
    that later lists a name another one owns (a child's ``list_changed``, a restart, a
    reload) does not expose it: the existing one stays, whatever the config's order,
    and one warning names both servers and the fix.
    """

    def __init__(self) -> None:
        self.owners: dict[tuple[str, str], str] = {}  # (kind, key) -> mount name
        self.active = False  # off while the launch lists every server's own names
        self.namespaces: dict[str, str | None] = {}
        self._warned: set[tuple[str, str, str]] = set()

    def allows(self, mount: str, kind: str, key: str) -> bool:
        """Whether *mount* may expose *key*; a name nobody owns yet becomes *mount*'s."""
        if not self.active:
            return True
        owner = self.owners.get((kind, key))
        if owner is None:
            if kind == "tool" and not TOOL_NAME.match(key):
                self._refuse(mount, kind, key, None)
                return False
            self.owners[(kind, key)] = owner = mount
        if owner != mount:
            self._refuse(mount, kind, key, owner)
            return False
        return True

    def assign_owners(self, mounts: list[Mount]) -> list[Mount]:
        """*mounts* (their own lists, in config order) cut to what each may expose.

        A name stays with its owner while the owner still lists it; the rest go to the first
        server listing them. Tool names the MCP spec does not allow are never exposed.
        """
        self.namespaces = {mount.name: mount.entry.namespace for mount in mounts}
        owners: dict[tuple[str, str], str] = {}
        for mount in mounts:
            for kind, key in _keys(mount):
                if self.owners.get((kind, key)) == mount.name:
                    owners[(kind, key)] = mount.name
        for mount in mounts:
            for kind, key in _keys(mount):
                if kind == "tool" and not TOOL_NAME.match(key):
                    self._refuse(mount.name, kind, key, None)
                    continue
                owner = owners.setdefault((kind, key), mount.name)
                if owner != mount.name:
                    self._refuse(mount.name, kind, key, owner)
        self.owners, self.active = owners, True

        def own(mount: Mount, kind: str, key: str) -> bool:
            return owners.get((kind, key)) == mount.name

        cut = []
        for mount in mounts:
            tools = tuple(t for t in mount.tools if own(mount, "tool", t.name))
            cut.append(
                replace(
                    mount,
                    tools=tools,
                    locked=locked_names(mount.entry, tools),
                    prompts=tuple(p for p in mount.prompts if own(mount, "prompt", p)),
                    resources=tuple(r for r in mount.resources if own(mount, "resource", r)),
                )
            )
        return cut

    def _refuse(self, mount: str, kind: str, key: str, owner: str | None) -> None:
        """One warning per server and name: why it is not exposed, and the fix."""
        if (mount, kind, key) in self._warned:
            return
        self._warned.add((mount, kind, key))
        if owner is None:
            log.warning(
                "servers.%s: tool %r is not exposed: not a valid MCP tool name (%s)",
                mount,
                key,
                TOOL_NAME_RULE,
            )
            return
        namespace = self.namespaces.get(mount)
        own = key.removeprefix(f"{namespace}_") if namespace else key
        leave_out = (
            f" or leave it out (servers.{mount}.tools.exclude: [{own}])" if kind == "tool" else ""
        )
        log.warning(
            "servers.%s: its %s %r is not exposed: %r already provides that name; set a "
            "namespace on %r (e.g. servers.%s.namespace: %s)%s",
            mount,
            kind,
            key,
            owner,
            mount,
            mount,
            suggested_namespace(mount),
            leave_out,
        )


def _keys(mount: Mount) -> list[tuple[str, str]]:
    return (
        [("tool", t.name) for t in mount.tools]
        + [("prompt", p) for p in mount.prompts]
        + [("resource", r) for r in mount.resources]
    )


def own_name_of(mount: Mount, name: str) -> str:
    """The server's own name for *mount*'s exposed tool *name* (its namespace taken off)."""
    namespace = mount.entry.namespace
    return name.removeprefix(f"{namespace}_") if namespace else name


def suggested_namespace(mount_name: str) -> str:
    """A namespace the config accepts (``NAMESPACE_PATTERN``), made from a mount name."""
    return re.sub(r"[^A-Za-z0-9-]+", "-", mount_name).strip("-")[:30].strip("-") or "ns"


def refuse_bad_names(mounts: list[Mount], fresh: set[str] | None = None) -> None:
    """Two servers exposing one name would leave the second unreachable; the MCP spec refuses odd
    names (what clients take is decided later, compose/profile_names.py).

    fastmcp 4 logs a warning and lets the first provider win; here it is an error. With
    *fresh* (a reload: the servers it starts), only a clash involving one of those counts:
    one between kept servers was decided when it arose (:class:`Exposure`).
    """

    def clash(owning: list[Mount]) -> tuple[Mount, Mount] | None:
        names = [mount.name for mount in owning]
        if len(set(names)) < 2:
            return None
        if fresh is None:
            return owning[0], owning[1]
        for i, first in enumerate(owning):
            for second in owning[i + 1 :]:
                if second.name != first.name and {first.name, second.name} & fresh:
                    return first, second
        return None

    owners: dict[str, list[Mount]] = {}
    for mount in mounts:
        for tool in mount.tools:
            owners.setdefault(tool.name, []).append(mount)
    for tool_name, owning in owners.items():
        pair = clash(owning)
        if pair is not None:
            first, second = pair
            namespace = second.entry.namespace
            own = tool_name.removeprefix(f"{namespace}_") if namespace else tool_name
            raise CompositionError(
                f"tool name collision: {tool_name!r} is provided by both {first.name!r} and "
                f"{second.name!r}; give one of them a namespace (e.g. servers.{second.name}."
                f"namespace: {suggested_namespace(second.name)}) or leave the tool out of one "
                f"(e.g. servers.{second.name}.tools.exclude: [{own}])"
            )
        if not TOOL_NAME.match(tool_name) and (fresh is None or owning[0].name in fresh):
            raise CompositionError(
                f"tool {tool_name[:200]!r} from {owning[0].name!r} is not a valid MCP tool name "
                f"({TOOL_NAME_RULE}); shorten servers.{owning[0].name}.namespace or leave the "
                f"tool out (servers.{owning[0].name}.tools.exclude: "
                f"[{own_name_of(owning[0], tool_name)[:200]}])"
            )
    for kind, key in (("prompt", "prompts"), ("resource", "resources")):
        holders: dict[str, list[Mount]] = {}
        for mount in mounts:
            for item in getattr(mount, key):
                holders.setdefault(item, []).append(mount)
        for item, owning in holders.items():
            pair = clash(owning)
            if pair is not None:
                later = pair[1].name
                raise CompositionError(
                    f"{kind} collision: {item!r} is provided by both {pair[0].name!r} and "
                    f"{later!r}, so one of them could not be reached; give one of them a "
                    f"namespace (e.g. servers.{later}.namespace: {suggested_namespace(later)})"
                )
