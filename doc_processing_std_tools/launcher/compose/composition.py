"""Build every configured server and mount them into one FastMCP server, in one step.

Each server is mounted whole, so it behaves exactly as it does alone (its errors,
masking, middleware and lifespan). fastmcp lets the first of two same-named tools
win (with a logged warning); here a collision is an error that names both servers.
Mounted servers' instructions would be dropped too; they are merged into the
composed server's instructions instead.
"""

from __future__ import annotations

import functools
import logging
import re
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ...servers import (
    UNAVAILABLE,
    Findings,
    ServerLoadError,
    ServerSpec,
    ServerUnavailable,
    resolve_module,
    resolve_registered,
)
from ..calls.guards import CallGuards
from ..calls.pin_gate import PinGate
from ..calls.policed_tools import MountRules
from ..calls.policy import LockMode
from ..config.schema import (
    ConfigError,
    LoadedConfig,
    LockConfig,
    ServerEntry,
    describe_validation_error,
)
from ..config.yaml_file import format_error
from .callers import call_guards
from .mounting import exposed_only, mounted_provider
from .pinning import gate_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.abc import TaskGroup
    from fastmcp import FastMCP
    from fastmcp.server.providers import Provider
    from fastmcp.tools import Tool

    from ...telemetry import Telemetry
    from ..external.client_requests import Fronts
    from ..external.supervisor import Supervisor

log = logging.getLogger("dpt-launch")
# The MCP spec's tool-name rule (2025-11-25): what clients see is narrower (compose/profiles.py).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
TOOL_NAME_RULE = "letters, digits, '_', '-' and '.', at most 128 characters (the MCP spec)"
DEFAULT_INSTRUCTIONS = (
    "Standard tools composed by dpt-launch. Each section below describes one mounted server."
)


class CompositionError(Exception):
    """The servers cannot be served together (e.g. a tool-name collision)."""


class ServerStartError(Exception):
    """A server that must serve (``required``, or ``--strict``) could not be started."""


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
    tools: tuple[Tool, ...] = ()  # as exposed: namespace applied, lock wrapper included
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
            from ..external.session_transports import shown_url

            return shown_url(self.entry.url)
        return self.entry.command or self.name

    def describe(self) -> list[tuple[str, str]]:
        """Rows for ``--check``: the server's own ``describe(settings)``, if any."""
        return self.spec.rows(self.settings) if self.spec else []

    def findings(self) -> list[tuple[str, str]]:
        """``(level, text)`` pairs from the server's ``check(settings)``: FAIL or WARN (an
        UNAVAILABLE one skipped the server)."""
        return list(self.problems)


@dataclass
class Composition:
    """The composed server, ready to serve: tools listed, names checked, locking decided.

    ``reload.apply`` may later swap mounts in place; everything else is fixed.
    """

    root: FastMCP
    mounts: list[Mount]
    skipped: list[tuple[str, str]]  # (mount name, why): a missing extra, an unreachable server
    loaded: LoadedConfig
    sessions: AsyncExitStack  # external servers' sessions and other per-mount tasks
    group: TaskGroup  # where those tasks run
    watch: bool = False  # reload when the config file changes (dpt-launch --watch)
    strict: bool = False  # a server that fails to start refuses the launch, or the reload
    reload_lock: Any = None  # one reload or list refresh at a time (SIGHUP, --watch, list_changed)
    exposure: Exposure = field(default_factory=lambda: Exposure())  # who owns each exposed name
    # late mounts not listed yet -> set once their server is up and listed (or failed)
    starting: dict[str, Any] = field(default_factory=dict)
    telemetry: Telemetry = field(default_factory=lambda: _no_telemetry())  # metrics, spans
    guards: CallGuards | None = None  # the audit log and rate limits (calls/guards.py)
    # after a refresh swapped the mounts: the names clients see follow (profiles.follow_names)
    on_tools_changed: Callable[[Composition], None] | None = None
    pins: PinGate = field(default_factory=PinGate)  # the lock file's verdicts (compose/pinning.py)

    async def aclose(self) -> None:
        """End every external server's session (and child process); send the last spans."""
        try:
            await self.sessions.aclose()
        finally:
            if self.guards is not None:
                await self.guards.aclose()
            if self.telemetry.tracing is not None:
                import anyio

                await anyio.to_thread.run_sync(self.telemetry.shutdown)

    def external_states(self) -> dict[str, str]:
        """Each external server's state by mount name (a skipped one: ``failed``)."""
        states = {m.name: m.state for m in self.mounts if m.supervisor is not None}
        entries = self.loaded.config.servers
        for name, _why in self.skipped:
            entry = entries.get(name)
            if entry is not None and entry.external:
                states[name] = "failed"
        return states

    def external_restarts(self) -> dict[str, int]:
        """How often each mounted external server's session was started again."""
        return {m.name: m.supervisor.restarts for m in self.mounts if m.supervisor is not None}

    def server_states(self) -> dict[str, dict[str, Any]]:
        """Each server's state (``/ready``): mounted ones live; a skipped external one ``failed``,
        others ``skipped``."""
        servers: dict[str, dict[str, Any]] = {}
        for mount in self.mounts:
            servers[mount.name] = {"state": mount.state, "required": mount.entry.required}
            if mount.state == "needs-login" and mount.supervisor is not None:
                servers[mount.name]["reason"] = mount.supervisor.unavailable()
            drifted = self.pins.drifted_of(mount.name)
            if drifted:  # definitions not as approved (pins)
                servers[mount.name]["drifted"] = drifted
        entries = self.loaded.config.servers
        for name, why in self.skipped:
            entry = entries.get(name)
            state = "failed" if entry is not None and entry.external else "skipped"
            required = bool(entry and entry.required)
            servers[name] = {"state": state, "required": required, "reason": why}
        return servers

    def watch_lists(self) -> None:
        """Have each external server's ``list_changed`` applied by :meth:`refresh`, and each
        :attr:`Mount.late` one listed once it is up."""
        import anyio

        for mount in self.mounts:
            if mount.supervisor is not None:
                mount.supervisor.on_list_changed = functools.partial(self._list_changed, mount.name)
            if mount.late and mount.supervisor is not None and mount.name not in self.starting:
                self.starting[mount.name] = event = anyio.Event()
                self.group.start_soon(self._list_when_up, mount.name, mount.supervisor, event)

    async def _list_when_up(self, name: str, supervisor: Supervisor, event: Any) -> None:
        """A server still starting when serving began: its lists are applied (and every client
        told) once it is up, or one warning says why it never came up."""
        from ..external.session_transports import ExternalStartError

        try:
            await supervisor.wait_started()
        except ExternalStartError as exc:
            log.warning("servers.%s not mounted: %s", name, exc)
        else:
            await self.refresh(name)
        finally:
            self.starting.pop(name, None)
            event.set()

    async def until_started(self, tool: str) -> str | None:
        """A call names *tool*, which nothing exposes, while servers are still starting: wait for
        those that could own the name (by namespace), each within its ``timeout``. Returns why
        the call cannot go on (the server is still starting), or None to serve it as usual."""
        import anyio

        def exposes() -> bool:
            return any(t.name == tool for m in self.mounts for t in m.tools)

        if exposes():
            return None
        candidates = [
            m
            for m in self.mounts
            if m.name in self.starting
            and (not m.entry.namespace or tool.startswith(f"{m.entry.namespace}_"))
        ]
        began = anyio.current_time()
        for mount in candidates:
            event = self.starting.get(mount.name)
            if event is not None:
                with anyio.move_on_after(began + mount.entry.timeout - anyio.current_time()):
                    await event.wait()
        waiting = [m for m in candidates if m.name in self.starting]
        if waiting and not exposes() and waiting[0].supervisor is not None:
            return waiting[0].supervisor.unavailable()
        return None

    def _list_changed(self, name: str) -> None:
        self.group.start_soon(self.refresh, name)

    async def refresh(self, name: str) -> None:
        """Server *name* said its lists changed: list them again under the launch-time rules (its
        filters and namespace, no name another server exposes) and tell every client what changed.
        """
        import anyio

        from .sessions import registry_of

        if self.reload_lock is None:
            self.reload_lock = anyio.Lock()
        async with self.reload_lock:
            mount = next((m for m in self.mounts if m.name == name), None)
            if mount is None or mount.listing is None:
                return  # (removed by a reload meanwhile)
            try:
                live = await listed_live(mount)
            except Exception as exc:
                log.warning("servers.%s: could not list what it changed: %s", name, exc)
                return
            before = self.mounts
            self.mounts = self.exposure.settle([live if m is mount else m for m in before])
            if self.on_tools_changed is not None:
                self.on_tools_changed(self)
            changed = [
                kind
                for kind in ("tools", "prompts", "resources")
                if [exposed(m, kind) for m in before] != [exposed(m, kind) for m in self.mounts]
            ]
        registry = registry_of(self.root)
        if changed and registry is not None:
            await registry.notify_lists_changed(changed)

    @property
    def tool_count(self) -> int:
        return sum(len(mount.tools) for mount in self.mounts)

    def findings(self) -> list[tuple[str, str, str]]:
        """``(mount name, level, text)`` for every problem a server module reports about itself."""
        return [(m.name, level, text) for m in self.mounts for level, text in m.findings()]


def needs_lock(policy: str, tool: Tool) -> bool:
    """``lock: auto``: every tool that may change state runs under the process lock.

    ``always`` and ``never`` override the annotation. See :func:`locks_itself` for who
    takes it: the launcher, or the server around its own disk work.
    """
    if policy != "auto":
        return policy == "always"
    return not (tool.annotations and tool.annotations.read_only_hint)


def lock_mode(policy: str, self_locking: bool, tool: Tool) -> LockMode:
    """Who takes the process lock for a call of *tool*: nobody, the launcher, or (a server that
    :func:`locks_itself`) the tool around its disk work."""
    if not needs_lock(policy, tool):
        return LockMode.NONE
    return LockMode.ADMITTED if self_locking else LockMode.HELD


def locks_itself(mount: Mount) -> bool:
    """Whether *mount*'s state-changing tools take the process lock themselves (``lock: auto``
    on a ``ServerSpec.locks_itself`` server), around their disk work only.

    The launcher then does not hold the lock for the whole call, which would also cover the
    tool's reading and computing (a slow ``memory_str_replace`` search would block every
    writer of every server); it only bounds how many such calls run at once
    (:func:`locking.admit_self_locking`), so their thread-side waits never take the whole
    worker pool. ``lock: always`` keeps the launcher's hold (the tool's own take then skips).
    """
    return mount.spec is not None and mount.spec.locks_itself and mount.entry.lock == "auto"


def resolve_sources(
    loaded: LoadedConfig,
) -> tuple[list[tuple[str, ServerEntry, ServerSpec | None]], list[tuple[str, str]]]:
    """Find every enabled server's spec (None for external ones). Missing optional
    extras are skipped, not fatal."""
    found: list[tuple[str, ServerEntry, ServerSpec | None]] = []
    skipped: list[tuple[str, str]] = []
    for name, entry in loaded.config.servers.items():
        if not entry.enabled:
            continue
        if entry.external:
            found.append((name, entry, None))
            continue
        source: ServerSpec | None
        try:
            if entry.module:
                source = resolve_module(entry.module, search_dir=loaded.base_dir)
            else:
                source = resolve_registered(entry.server or name)
        except ServerLoadError as exc:
            if (
                isinstance(exc, ServerUnavailable)
                or exc.extra
                or (entry.module and not exc.config_error)
            ):
                skipped.append((name, str(exc)))  # build_servers decides: skip, or stop
                continue
            key = "module" if entry.module else ("server" if entry.server else "")
            loc: tuple[str, ...] = ("servers", name, key) if key else ("servers", name)
            raise loaded.error(loc, str(exc)) from None
        found.append((name, entry, source))

    singles: dict[int, list[str]] = {}
    for name, _entry, source in found:
        if source is not None and source.one_per_process:
            singles.setdefault(id(source.create), []).append(name)
    for names in singles.values():
        if len(names) > 1:
            raise loaded.error(
                ("servers", names[1]),
                f"{names[0]!r} and {names[1]!r} both mount the same server, which allows only one "
                "instance per process (it holds one process-wide connection); keep one, or run a "
                "second dpt-launch with its own config",
            )
    return found, skipped


async def compose(
    loaded: LoadedConfig,
    *,
    strict: bool = False,
    only: set[str] | None = None,
    grace: float | None = None,
    telemetry: Telemetry | None = None,
    pins: PinGate | None = None,
) -> Composition:
    """Build every enabled server (or those named in *only*), mount it, list what it exposes
    and refuse bad names.

    One step: a :class:`Composition` that exists can be served as it is (call
    :meth:`Composition.aclose` when done with it). External servers are started
    or reached here; one that fails is skipped, unless it is ``required`` or
    *strict* is set. With a *grace* (seconds), an external server that is not ``required`` and
    still starting then is mounted with nothing listed (:attr:`Mount.late`), so serving
    begins: its lists follow when it is up. Raises :class:`ConfigError` for bad settings,
    :class:`CompositionError` for tools that cannot be served together and
    :class:`ServerStartError` for a required server that cannot start. *telemetry*
    observes every call (default: what the config's ``telemetry`` asks for); *pins* judges
    every definition (default: the config's ``pins`` and lock file).
    """
    import anyio
    from fastmcp import FastMCP

    from ... import __version__
    from ...seams.fastmcp_server import add_server_middleware
    from ..external.relay import ToolRelay
    from .sessions import SessionRegistry

    if telemetry is None:
        telemetry = telemetry_of(loaded)
    guards = call_guards(loaded)
    sessions = AsyncExitStack()
    try:
        # Per-mount tasks (external sessions) live as long as the composition.
        group = await sessions.enter_async_context(anyio.create_task_group())
        sessions.callback(group.cancel_scope.cancel)
        if loaded.config.lock is not None:
            use_fleet_lock(sessions, loaded.config.lock)
        if pins is None:
            pins = gate_for(loaded)
        # Sessions to notify on reload, the per-session cache of the client's MCP roots
        # (dropped on roots/list_changed) and the sessions external servers' own requests
        # reach: only the served root sees notifications.
        registry = SessionRegistry()
        built, skipped = await build_servers(
            loaded, group, sessions, strict=strict, only=only, fronts=registry.fronts, grace=grace
        )
        config = loaded.config
        root = FastMCP(
            config.name,
            instructions=merge_instructions(config.instructions, built),
            version=__version__,
            middleware=[registry],
        )
        exposure = Exposure()
        mounts = [
            await mount_into(
                root, mount, exposure=exposure, telemetry=telemetry, guards=guards, pins=pins
            )
            for mount in built
        ]
        refuse_bad_names(mounts)
        mounts = exposure.settle(mounts)
    except BaseException:
        await sessions.aclose()
        if guards is not None:
            await guards.aclose()
        raise
    composition = Composition(
        root,
        mounts,
        skipped,
        loaded,
        sessions,
        group,
        reload_lock=anyio.Lock(),
        exposure=exposure,
        telemetry=telemetry,
        guards=guards,
        pins=pins,
    )
    composition.watch_lists()
    from .subscriptions import Subscriptions

    Subscriptions(composition).install()
    # External servers' tool calls go straight over their sessions (per-call cost).
    add_server_middleware(root, ToolRelay(root, composition, (SessionRegistry,)))
    return composition


def _no_telemetry() -> Telemetry:
    from ...telemetry import Telemetry

    return Telemetry()


def telemetry_of(loaded: LoadedConfig) -> Telemetry:
    """The config's ``telemetry``: spans to its OTLP endpoint when one is set (the ``otel``
    extra; its SDK is imported only then). Metrics are turned on by the HTTP transport."""
    from ...telemetry import Telemetry, Tracing

    config = loaded.config
    endpoint = config.telemetry.otlp_endpoint
    if endpoint is None:
        return Telemetry()
    try:
        tracing = Tracing.to_otlp(endpoint, config.telemetry.service_name or config.name)
    except ImportError as exc:
        raise ConfigError(
            format_error(
                loaded.path,
                loaded.lines,
                ("telemetry", "otlp_endpoint"),
                f"needs the otel extra ({exc.name or 'opentelemetry'} is not installed): "
                "pip install 'doc-processing-std-tools[otel]'",
            )
        ) from None
    return Telemetry(tracing)


def use_fleet_lock(sessions: AsyncExitStack, config: LockConfig) -> None:
    """Make every locked call take the fleet lock of *config* too, until *sessions* close."""
    from ... import locking
    from ...locking.fleet_lock import FleetLock

    fleet = FleetLock(config.url, config.name, config.lease)
    locking.use_fleet_lock(fleet)

    def stop() -> None:
        if locking.fleet_lock_in_use() is fleet:
            locking.use_fleet_lock(None)
        fleet.close()

    sessions.callback(stop)


async def mount_into(
    root: FastMCP,
    mount: Mount,
    *,
    add: bool = True,
    exposure: Exposure | None = None,
    telemetry: Telemetry | None = None,
    guards: CallGuards | None = None,
    pins: PinGate | None = None,
) -> Mount:
    """Wrap *mount*'s server with the launcher's rules, list its tools, and (if *add*) mount it.

    With an *exposure*, what is mounted shows only the names the composition lets it own
    (:class:`Exposure`); the lists returned are the server's own, for the collision check.
    """

    entry = mount.entry
    own_names: set[str] = set()  # the server's own tool names, seen by the first listing
    listing = True

    def admits(name: str) -> bool:
        if listing:
            own_names.add(name)
        return entry.tools.admits(name)

    provider = mounted_provider(
        mount.server,
        MountRules(
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
        ),
    )
    shown = (
        exposed_only(provider, functools.partial(exposure.allows, mount.name))
        if exposure is not None
        else provider
    )
    if add:
        root.add_provider(shown)
    tools = tuple(await provider.list_tools())
    if mount.state != "needs-login":  # (its cached list may be empty: never logged in)
        warn_idle_globs(mount.name, entry, own_names)
    listing = False  # (later listings need not record)
    prompts, resources = await _prompts_and_resources(mount.name, provider)
    return replace(
        mount,
        provider=shown,
        listing=provider,
        tools=tools,
        locked=locked_names(entry, tools),
        prompts=prompts,
        resources=resources,
    )


def locked_names(entry: ServerEntry, tools: tuple[Tool, ...]) -> frozenset[str]:
    return frozenset(t.name for t in tools if needs_lock(entry.lock, t))


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

    def settle(self, mounts: list[Mount]) -> list[Mount]:
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

        settled = []
        for mount in mounts:
            tools = tuple(t for t in mount.tools if own(mount, "tool", t.name))
            settled.append(
                replace(
                    mount,
                    tools=tools,
                    locked=locked_names(mount.entry, tools),
                    prompts=tuple(p for p in mount.prompts if own(mount, "prompt", p)),
                    resources=tuple(r for r in mount.resources if own(mount, "resource", r)),
                )
            )
        return settled

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


async def build_servers(
    loaded: LoadedConfig,
    group: TaskGroup,
    sessions: AsyncExitStack,
    *,
    strict: bool,
    only: set[str] | None = None,
    fronts: Fronts | None = None,
    grace: float | None = None,
) -> tuple[list[Mount], list[tuple[str, str]]]:
    """Validate settings and build every enabled server (or those named in *only*).

    External servers' supervisors run in *group*; they start concurrently. What they
    ask of the client reaches the sessions of *fronts*. With a *grace*, those not ``required``
    (and not *strict*) are waited for that long in all, then mounted ``late`` if still starting.
    """
    import anyio

    from ..external.session_transports import ExternalStartError
    from ..external.supervisor import Supervisor

    found, skipped = resolve_sources(loaded)
    if only is not None:
        found = [item for item in found if item[0] in only]
        skipped = [item for item in skipped if item[0] in only]
    supervisors: dict[str, Supervisor] = {}
    for name, entry, _source in found:
        if entry.external:
            supervisor = supervisors[name] = Supervisor(name, entry, loaded.base_dir, fronts)
            if entry.auth is not None:  # (its calls use the signed-in user's own login)
                from ..transports.identity import current_subject

                supervisor.subject = current_subject
            sessions.callback(supervisor.close)
            group.start_soon(supervisor.run)

    mounts: list[Mount] = []
    deadline = None if grace is None else anyio.current_time() + grace
    for name, entry, spec in found:
        if entry.external:
            supervisor = supervisors[name]
            try:
                if deadline is None or entry.required or strict:
                    await supervisor.wait_started()
                else:
                    with anyio.move_on_after(deadline - anyio.current_time()):
                        await supervisor.wait_started()
            except ExternalStartError as exc:
                skipped.append((name, str(exc)))
                continue
            late = supervisor.state == "starting"
            if late:
                log.info("servers.%s is still starting: its tools are listed when it is up", name)
            mount = Mount(name, None, entry, None, supervisor.proxy(), supervisor, late=late)
            mounts.append(mount)
            continue
        assert spec is not None
        try:
            settings = spec.validate_settings(entry.settings, loaded.base_dir)
        except ValidationError as exc:
            raise ConfigError(
                describe_validation_error(
                    exc,
                    loaded.path,
                    loaded.lines,
                    prefix=("servers", name, "settings"),
                    model=spec.settings,
                )
            ) from None
        except OSError as exc:  # a validator touched the filesystem (name too long, no access)
            raise loaded.error(("servers", name, "settings"), str(exc)) from None
        problems = spec.findings(settings)
        unavailable = unavailable_reason(problems)
        if unavailable is not None:  # the machine lacks something: skip it, say why and the fix
            skipped.append((name, unavailable))
            continue
        try:
            server = spec.build(settings)
        except ServerLoadError as exc:
            if isinstance(exc, ServerUnavailable) or exc.extra:
                skipped.append((name, str(exc)))
                continue
            raise loaded.error(("servers", name), str(exc)) from None
        except TypeError as exc:  # a factory refusing its settings is a config error
            raise loaded.error(
                ("servers", name), f"cannot build {spec.name}: {type(exc).__name__}: {exc}"
            ) from None
        except Exception as exc:  # whatever else a factory raises is reported, not traced
            skipped.append((name, f"cannot build {spec.name}: {type(exc).__name__}: {exc}"))
            continue
        mounts.append(Mount(name, spec, entry, settings, server, problems=tuple(problems)))
    for name, why in skipped:
        entry = loaded.config.servers[name]
        if entry.required or strict:
            for mount in mounts:
                if mount.supervisor is not None:
                    mount.supervisor.stop()
            raise ServerStartError(f"servers.{name}: {why}")
    return mounts, skipped


def unavailable_reason(problems: Findings) -> str | None:
    """The environmental problems among a server's ``check`` findings, as one line, or None."""
    reasons = [text for level, text in problems if level == UNAVAILABLE]
    return "; ".join(reasons) if reasons else None


def warn_idle_globs(name: str, entry: ServerEntry, own_names: set[str]) -> None:
    """One stderr line per ``tools`` glob that matches none of the server's tools: a typo there
    would hide a tool, or leave exposed one meant to be left out."""
    from fnmatch import fnmatchcase

    for key, globs in (("include", entry.tools.include), ("exclude", entry.tools.exclude)):
        for glob in globs:
            if not any(fnmatchcase(own, glob) for own in own_names):
                prefix = f"{entry.namespace}_" if entry.namespace else ""
                hint = (
                    f" (globs match its own names, without the '{prefix}' namespace)"
                    if prefix and glob.startswith(prefix)
                    else ""
                )
                shown = ", ".join(sorted(own_names)[:20]) or "none"
                log.warning(
                    "servers.%s.tools.%s: %r matches none of its tools%s; its tools: %s",
                    name,
                    key,
                    glob,
                    hint,
                    shown,
                )


def merge_instructions(own: str | None, mounts: list[Mount]) -> str:
    """The composed instructions: the config's own text, then each mounted server's."""
    parts = [own or DEFAULT_INSTRUCTIONS]
    for mount in mounts:
        text = (mount.server.instructions or "").strip()
        if text:
            prefix = (
                f" (tools prefixed '{mount.entry.namespace}_')" if mount.entry.namespace else ""
            )
            parts.append(f"## {mount.name}{prefix}\n{text}")
    return "\n\n".join(parts)


def own_name_of(mount: Mount, name: str) -> str:
    """The server's own name for *mount*'s exposed tool *name* (its namespace taken off)."""
    namespace = mount.entry.namespace
    return name.removeprefix(f"{namespace}_") if namespace else name


def suggested_namespace(mount_name: str) -> str:
    """A namespace the config accepts (``NAMESPACE_PATTERN``), made from a mount name."""
    return re.sub(r"[^A-Za-z0-9-]+", "-", mount_name).strip("-")[:30].strip("-") or "ns"


def refuse_bad_names(mounts: list[Mount], fresh: set[str] | None = None) -> None:
    """Two servers exposing one name would leave the second unreachable; the MCP spec refuses odd
    names (what clients take is settled later, compose/profiles.py).

    fastmcp 4 logs a warning and lets the first provider win; here it is an error. With
    *fresh* (a reload: the servers it starts), only a clash involving one of those counts:
    one between kept servers was settled when it arose (:class:`Exposure`).
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
