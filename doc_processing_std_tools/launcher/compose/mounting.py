"""A server as ``FastMCP.mount`` would add it, with the launcher's rules around its tools, and
showing only the names the composition lets it own; what it lists, for the name checks."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

import anyio
from fastmcp import FastMCP
from fastmcp.server.providers import Provider
from fastmcp.server.providers.aggregate import AggregateProvider
from fastmcp.server.providers.fastmcp_provider import FastMCPProvider
from fastmcp.server.transforms import Namespace, Transform

from ...seams.fastmcp_server import behaves_as_default, namespaced_name
from ..calls.guards import CallGuards
from ..calls.pin_gate import PinGate
from ..calls.policed_tools import MountRules, PolicedListing
from ..config.schema import ServerEntry
from ..external.result_links import exposed_result_links
from .exposure import Exposure
from .lock_policy import lock_mode, locked_names, locks_itself
from .mount import Mount
from .profile_names import exposed_name
from .profiles import PLAIN_RULE

if TYPE_CHECKING:
    from ...telemetry import Telemetry

log = logging.getLogger("dpt-launch")


def mounted_provider(
    server: FastMCP, rules: MountRules, policing: PolicedListing | None = None
) -> Provider:
    """*server* as ``FastMCP.mount`` would add it, its tools policed by *rules* (through
    *policing*, when the caller keeps it).

    A server with settings of its own is mounted whole (its middleware, error masking and
    lifespan all apply, exactly as when it runs alone); one with none has its providers served
    directly (:func:`~doc_processing_std_tools.seams.fastmcp_server.behaves_as_default`): one
    dispatch layer fewer per call (``benchmarks/run.py``).
    """
    inner: Provider = (
        AggregateProvider(list(server.providers))
        if behaves_as_default(server)
        else FastMCPProvider(server)
    )
    provider: Provider = inner.wrap_transform(policing or PolicedListing(rules))
    if rules.namespace:
        provider = provider.wrap_transform(Namespace(rules.namespace))
    return provider


class ShownOnly(Transform):
    """What a provider lists and finds, limited to what *allows* ``(kind, key)`` lets through:
    kind ``tool`` (key: the exposed name), ``prompt`` (its name) or ``resource`` (a URI or URI
    template), so a name another server owns can neither be listed nor called here. (A look-up
    asks every server: only one that has the name may be told it is hidden.)"""

    def __init__(self, allows: Callable[[str, str], bool]) -> None:
        self._allows = allows

    async def list_tools(self, tools: Sequence[Any]) -> Sequence[Any]:
        return [tool for tool in tools if self._allows("tool", tool.name)]

    async def get_tool(self, name: str, call_next: Any, *, version: Any = None) -> Any:
        found = await call_next(name, version=version)
        return found if found is not None and self._allows("tool", name) else None

    async def list_prompts(self, prompts: Sequence[Any]) -> Sequence[Any]:
        return [prompt for prompt in prompts if self._allows("prompt", prompt.name)]

    async def get_prompt(self, name: str, call_next: Any, *, version: Any = None) -> Any:
        found = await call_next(name, version=version)
        return found if found is not None and self._allows("prompt", name) else None

    async def list_resources(self, resources: Sequence[Any]) -> Sequence[Any]:
        return [item for item in resources if self._allows("resource", str(item.uri))]

    async def get_resource(self, uri: str, call_next: Any, *, version: Any = None) -> Any:
        found = await call_next(uri, version=version)
        if found is None or not self._allows("resource", str(found.uri)):
            return None
        return found

    async def list_resource_templates(self, templates: Sequence[Any]) -> Sequence[Any]:
        return [item for item in templates if self._allows("resource", item.uri_template)]

    async def get_resource_template(self, uri: str, call_next: Any, *, version: Any = None) -> Any:
        found = await call_next(uri, version=version)
        if found is None or not self._allows("resource", found.uri_template):
            return None
        return found


def exposed_only(provider: Provider, allows: Callable[[str, str], bool]) -> Provider:
    """*provider* showing only what *allows* lets through (:class:`ShownOnly`)."""
    return provider.wrap_transform(ShownOnly(allows))


async def mount_into(
    mount: Mount,
    *,
    exposure: Exposure | None = None,
    telemetry: Telemetry | None = None,
    guards: CallGuards | None = None,
    pins: PinGate | None = None,
) -> Mount:
    """Wrap *mount*'s server with the launcher's rules and list its tools; the caller adds
    ``provider`` of the mount returned to the root.

    With an *exposure*, what is mounted shows only the names the composition lets it own
    (:class:`Exposure`); the lists returned are the server's own, for the collision check.
    """

    entry = mount.entry
    own_names: set[str] = set()  # the server's own tool names, seen by the first listing
    listing = True

    def admits(name: str) -> bool:
        if listing:
            own_names.add(name)
        return entry.tools.admits(*glob_names(name, entry.namespace))

    rules = MountRules(
        server=mount.name,
        namespace=entry.namespace,
        admits=admits,
        lock_mode=functools.partial(lock_mode, entry.lock, locks_itself(mount)),
        timeout=entry.timeout,
        unavailable=mount.supervisor.unavailable if mount.supervisor else None,
        call_failed=mount.supervisor.call_failed if mount.supervisor else None,
        lists_while_down=mount.supervisor.lists_cached if mount.supervisor else None,
        telemetry=telemetry,
        guards=guards,
        pins=pins,
        shown=(
            functools.partial(exposed_result_links, entry.namespace)
            if mount.supervisor is not None and entry.namespace
            else None
        ),
    )
    policing = PolicedListing(rules)
    provider = mounted_provider(mount.server, rules, policing)
    shown = (
        exposed_only(provider, functools.partial(exposure.allows, mount.name))
        if exposure is not None
        else provider
    )
    tools = tuple(await provider.list_tools())
    problems = mount.problems
    if mount.state != "needs-login":  # (its cached list may be empty: never logged in)
        problems += tuple(("WARN", text) for text in idle_globs(entry, own_names))
    listing = False  # (later listings need not record)
    prompts, resources = await _prompts_and_resources(mount.name, provider)
    return replace(
        mount,
        problems=problems,
        provider=shown,
        listing=provider,
        policing=policing,
        tools=tools,
        every_tool=frozenset(namespaced_name(entry.namespace, own) for own in own_names),
        locked=locked_names(entry, tools),
        prompts=prompts,
        resources=resources,
    )


async def mount_all(
    root: FastMCP,
    built: Sequence[Mount],
    *,
    exposure: Exposure,
    telemetry: Telemetry | None,
    guards: CallGuards | None,
    pins: PinGate | None,
) -> list[Mount]:
    """:func:`mount_into` for each of *built*, their lists asked at once (an external server's
    lists are round trips to its child, mostly waited for: a launcher with three npm servers
    spent about a third of this step's wall time on CPU), then mounted on *root* in order
    (the order its lists show them in). The first error (in time) cancels the others' lists,
    since it ends the start-up anyway (no waiting for the slowest server), and is raised as it
    was. (A reload mounts one server at a time, with :func:`mount_into`.)"""
    done: list[Mount | None] = [None] * len(built)
    failed: list[Exception] = []

    async def one(index: int, mount: Mount) -> None:
        try:
            done[index] = await mount_into(
                mount,
                exposure=exposure,
                telemetry=telemetry,
                guards=guards,
                pins=pins,
            )
        except Exception as exc:  # (raised below as it is, not in an exception group)
            failed.append(exc)
            group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        for index, mount in enumerate(built):
            group.start_soon(one, index, mount)
    if failed:
        raise failed[0]
    mounts = []
    for result in done:
        assert result is not None
        mounts.append(result)
    for mount in mounts:
        assert mount.provider is not None
        root.add_provider(mount.provider)
    return mounts


async def listed_live(mount: Mount) -> Mount:
    """*mount* with its tools, prompts and resources as its server lists them now (before the
    composition's ownership filter)."""
    assert mount.listing is not None
    tools = tuple(await mount.listing.list_tools())
    prompts, resources = await _prompts_and_resources(mount.name, mount.listing)
    return replace(
        mount,
        tools=tools,
        locked=locked_names(mount.entry, tools),
        prompts=prompts,
        resources=resources,
        late=mount.late and mount.state == "starting",
    )


def exposed(mount: Mount, kind: str) -> list[Any]:
    """What *mount* exposes of *kind* (``tools``, ``prompts``, ``resources``), to compare."""
    if kind == "tools":
        return [(t.name, t.to_mcp_tool().model_dump()) for t in mount.tools]
    return list(getattr(mount, kind))


async def _prompts_and_resources(
    name: str, provider: Provider
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The prompt names and resource URIs (templates too) *provider* exposes, for the collision
    check. A server that cannot list them (no such capability) has none."""
    prompts: tuple[str, ...] = ()
    resources: list[str] = []
    try:
        prompts = tuple(prompt.name for prompt in await provider.list_prompts())
        resources += (str(resource.uri) for resource in await provider.list_resources())
        resources += (t.uri_template for t in await provider.list_resource_templates())
    except Exception as exc:
        log.debug("servers.%s: could not list its prompts or resources: %s", name, exc)
    return prompts, tuple(resources)


def glob_names(own: str, namespace: str | None) -> tuple[str, ...]:
    """The names a ``tools:`` glob is matched against: the server's own name, with its
    namespace, and each as clients see it (``drop.table`` is ``ext_drop_table`` to them)."""
    full = f"{namespace}_{own}" if namespace else own
    forms = (own, full, exposed_name(own, PLAIN_RULE), exposed_name(full, PLAIN_RULE))
    return tuple(dict.fromkeys(forms))


def idle_globs(entry: ServerEntry, own_names: set[str]) -> list[str]:
    """``--check``'s WARN line for each ``tools`` glob that matches none of the server's tools:
    a typo there would hide a tool, or leave exposed one meant to be left out."""
    found = []
    names = [n for own in sorted(own_names) for n in glob_names(own, entry.namespace)]
    for key, globs in (("include", entry.tools.include), ("exclude", entry.tools.exclude)):
        for glob in globs:
            if not any(fnmatchcase(name, glob) for name in names):
                shown = ", ".join(sorted(own_names)[:20]) or "none"
                found.append(f"tools.{key}: {glob!r} matches none of its tools; its tools: {shown}")
    return found
