"""Which mount exposes each tool, prompt and resource name: :class:`Owners`, one per list of
mounts, read by the middlewares that route or cut by owner (access, completions, prompt links,
tasks, profiles) instead of each walking the mounts per request."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from ...seams.fastmcp_server import own_uri, template_matches


class Owners:
    """The owners of one list of mounts' exposed names; each table built on first use (a
    composition without ``access:`` never builds the URI templates')."""

    def __init__(self, mounts: Sequence[Any]) -> None:
        self.mounts = tuple(mounts)

    @cached_property
    def named(self) -> Mapping[str, Any]:
        """Each mount by its name (the key under ``servers:``)."""
        return {m.name: m for m in self.mounts}

    @cached_property
    def tools(self) -> Mapping[str, str]:
        """Each exposed tool name's mount name."""
        return _first((t.name, m.name) for m in self.mounts for t in m.tools)

    @cached_property
    def prompt_mounts(self) -> Mapping[str, Any]:
        """Each exposed prompt name's mount."""
        return _first((p, m) for m in self.mounts for p in m.prompts)

    @cached_property
    def prompts(self) -> Mapping[str, str]:
        """Each exposed prompt name's mount name."""
        return {p: m.name for p, m in self.prompt_mounts.items()}

    @cached_property
    def resource_mounts(self) -> Mapping[str, Any]:
        """Each exposed resource URI and URI template's mount."""
        return _first((uri, m) for m in self.mounts for uri in m.resources)

    @cached_property
    def resources(self) -> Mapping[str, str]:
        """Each exposed resource URI and URI template's mount name."""
        return {uri: m.name for uri, m in self.resource_mounts.items()}

    @cached_property
    def templates(self) -> tuple[tuple[str, str], ...]:
        """(exposed URI template, mount name) pairs."""
        return tuple((uri, name) for uri, name in self.resources.items() if "{" in uri)

    @cached_property
    def namespaces(self) -> tuple[tuple[str, str], ...]:
        """(namespace, mount name) pairs."""
        return tuple((m.entry.namespace, m.name) for m in self.mounts if m.entry.namespace)

    @cached_property
    def task_only(self) -> frozenset[str]:
        """The exposed names of the external servers' tools that can only run as a task."""
        return frozenset(
            tool.name
            for mount in self.mounts
            if mount.supervisor is not None
            for tool in mount.tools
            if getattr(getattr(tool, "execution", None), "task_support", None) == "required"
        )

    def of_uri(self, uri: str) -> tuple[str, ...]:
        """The mounts that may serve a read of *uri*: the one listing it (fastmcp reads a
        listed resource before any template), else every one whose template matches it or
        whose namespace it carries (an unlisted read goes to that server)."""
        listed = self.resources.get(uri)
        if listed is not None:
            return (listed,)
        matched = [name for template, name in self.templates if template_matches(template, uri)]
        carried = [name for space, name in self.namespaces if own_uri(space, uri) != uri]
        return tuple(dict.fromkeys([*matched, *carried]))

    def key_owner(self, method: str, key: str) -> str | None:
        """The mount of a listed item named *key* in *method*'s list; None for one no mount
        exposes (the launcher's own: never cut)."""
        if method == "tools/list":
            return self.tools.get(key)
        if method == "prompts/list":
            return self.prompts.get(key)
        return self.resources.get(key)


class OwnersCache:
    """The :class:`Owners` of the mounts last asked for, built again only when asked for
    another list (a refresh or a reload assigns the composition a new one, never edits it)."""

    def __init__(self) -> None:
        self._mounts: object = None
        self._owners = Owners(())

    def of(self, mounts: Sequence[Any]) -> Owners:
        if mounts is not self._mounts:
            self._mounts, self._owners = mounts, Owners(mounts)
        return self._owners


def _first(pairs: Any) -> dict[str, Any]:
    """The pairs as a mapping, the first of a repeated key kept (as a walk of the mounts finds
    it; the composition exposes each name once)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        found.setdefault(key, value)
    return found
