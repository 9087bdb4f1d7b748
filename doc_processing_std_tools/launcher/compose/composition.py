"""Build every configured server and mount them into one FastMCP server, in one step.

Each server is mounted whole, so it behaves exactly as it does alone (its errors,
masking, middleware and lifespan). fastmcp lets the first of two same-named tools
win (with a logged warning); here a collision is an error that names both servers.
Mounted servers' instructions would be dropped too; they are merged into the
composed server's instructions instead. The steps live in their own modules:
``building`` (each server), ``mounting``, ``exposure`` (who owns each name),
``lock_policy``, ``telemetry_setup`` and ``instructions``.
"""

from __future__ import annotations

import functools
import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from fastmcp import FastMCP

from ... import __version__
from ...seams.fastmcp_server import add_server_middleware, defer_state_store
from ...telemetry import Telemetry
from ..calls.guards import CallGuards
from ..calls.pin_gate import PinGate
from ..config.schema import LoadedConfig
from ..external.relay import ToolRelay
from ..external.wording import ExternalStartError
from .access_gate import install_access
from .building import build_servers
from .callers import call_guards
from .completions import install_completions
from .exposure import Exposure, refuse_bad_names
from .instructions import merge_instructions
from .lock_policy import use_fleet_lock
from .mount import Mount
from .mounting import exposed, listed_live, mount_all
from .own_lists import install_own_lists
from .owners import Owners, OwnersCache
from .pinning import gate_for
from .prompt_links import install_prompt_links
from .sessions import Audience, SessionRegistry, registry_of
from .subscriptions import Subscriptions
from .tasks import install_tasks
from .telemetry_setup import telemetry_of
from .unlisted_calls import install_unlisted_calls
from .unlisted_reads import install_unlisted_reads

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.abc import TaskGroup

    from ..external.supervisor import Supervisor

log = logging.getLogger("dpt-launch")


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
    exposure: Exposure = field(default_factory=Exposure)  # who owns each exposed name
    # late mounts not listed yet -> set once their server is up and listed (or failed)
    starting: dict[str, Any] = field(default_factory=dict)
    telemetry: Telemetry = field(default_factory=Telemetry)  # metrics, spans
    guards: CallGuards | None = None  # access, audit log, rate limits (calls/guards.py)
    # after a refresh swapped the mounts: the names clients see follow (profiles.follow_names)
    on_tools_changed: Callable[[Composition], None] | None = None
    pins: PinGate = field(default_factory=PinGate)  # the lock file's verdicts (compose/pinning.py)
    owners_cache: OwnersCache = field(default_factory=OwnersCache, repr=False)

    def owners(self) -> Owners:
        """Which mount exposes each name, for the current mounts (built again once a refresh or
        a reload swaps them)."""
        return self.owners_cache.of(self.mounts)

    async def aclose(self) -> None:
        """End every external server's session (and child process); send the last spans."""
        try:
            await self.sessions.aclose()
        finally:
            if self.guards is not None:
                await self.guards.aclose()
            if self.telemetry.tracing is not None:
                await anyio.to_thread.run_sync(self.telemetry.shutdown)

    def external_states(self) -> dict[str, str]:
        """Each external server's state by mount name (a skipped one: ``failed``).

        Returns:
            Mount name to state: ``up``, ``starting``, ``restarting``, ``needs-login`` or
            ``failed``.
        """
        states = {m.name: m.state for m in self.mounts if m.supervisor is not None}
        entries = self.loaded.config.servers
        for name, _why in self.skipped:
            entry = entries.get(name)
            if entry is not None and entry.external:
                states[name] = "failed"
        return states

    def external_restarts(self) -> dict[str, int]:
        """How often each mounted external server's session was started again.

        Returns:
            Mount name to the number of restarts.
        """
        return {m.name: m.supervisor.restarts for m in self.mounts if m.supervisor is not None}

    def external_sessions(self) -> dict[str, tuple[int, int]]:
        """Each external server's pool of sessions of single clients or users.

        Returns:
            Mount name to (sessions open, ``max_sessions``).
        """
        return {m.name: m.supervisor.pool_size() for m in self.mounts if m.supervisor is not None}

    def external_early(self) -> dict[str, tuple[int, int, int]]:
        """Each ``per_client`` command's child started with the launcher for its first client
        (serving HTTP).

        Returns:
            Mount name to (waiting now, taken by a client's session, stopped unused).
        """
        return {
            m.name: m.supervisor.pool.early_counts()
            for m in self.mounts
            if m.supervisor is not None and m.entry.command
        }

    def last_errors(self) -> dict[str, str]:
        """Why each mounted external server's last session ended or failed to open ("": none)."""
        return {m.name: m.supervisor.last_error for m in self.mounts if m.supervisor is not None}

    def upstream_sessions(self) -> dict[str, int]:
        """How many upstream sessions each mounted external server holds now: its shared one
        while up, and those of its pool (single clients or users)."""
        return {
            m.name: int(m.supervisor.state == "up") + m.supervisor.pool_size()[0]
            for m in self.mounts
            if m.supervisor is not None
        }

    def not_serving(self) -> list[tuple[str, str]]:
        """``(mount name, why)`` for each enabled server that serves no call now: skipped at
        start (a missing extra, an unreachable store), or an external one that is down or needs
        a login (``tools``, ``call`` and ``/ready`` say why, as ``--check`` does)."""
        found = list(self.skipped)
        for mount in self.mounts:
            why = _why_not_up(mount)
            if why is not None:
                found.append((mount.name, why))
        return found

    def server_states(self) -> dict[str, dict[str, Any]]:
        """Each server's state (``/ready``): mounted ones live; a skipped external one ``failed``,
        others ``skipped``.

        Returns:
            Mount name to ``{"state": ..., "required": ...}``, with the ``reason`` a server needs a
            login and how many of its definitions ``drifted`` from the approved ones.
        """
        servers: dict[str, dict[str, Any]] = {}
        for mount in self.mounts:
            servers[mount.name] = {"state": mount.state, "required": mount.entry.required}
            why = _why_not_up(mount)
            if why is not None:
                servers[mount.name]["reason"] = why
            if mount.supervisor is not None:
                open_now, most = mount.supervisor.pool_size()
                servers[mount.name]["sessions"] = {
                    "mode": mount.entry.session_mode,
                    "open": open_now,
                    "max": most,
                }
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
        for mount in self.mounts:
            if mount.supervisor is not None:
                mount.supervisor.on_list_changed = functools.partial(self._list_changed, mount.name)
            if mount.late and mount.supervisor is not None and mount.name not in self.starting:
                self.starting[mount.name] = event = anyio.Event()
                self.group.start_soon(self._list_when_up, mount.name, mount.supervisor, event)

    async def _list_when_up(self, name: str, supervisor: Supervisor, event: Any) -> None:
        """A server still starting when serving began: its lists are applied (and every client
        told) once it is up, or one warning says why it never came up."""
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
        those that could own the name (by namespace), each within its ``timeout``.

        Args:
            tool: The tool name the call gives, as clients see it.

        Returns:
            Why the call cannot go on (the server is still starting), or None to serve it as usual.
        """

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

        Args:
            name: The mount name of the server whose lists changed.
        """
        if self.reload_lock is None:
            self.reload_lock = anyio.Lock()
        async with self.reload_lock:
            mount = self.owners().named.get(name)
            if mount is None or mount.listing is None:
                return  # (removed by a reload meanwhile)
            try:
                live = await listed_live(mount)
            except Exception as exc:
                log.warning("servers.%s: could not list what it changed: %s", name, exc)
                return
            before = self.mounts
            self.mounts = self.exposure.assign_owners([live if m is mount else m for m in before])
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
        """Every problem a server module reports about itself (its ``check``).

        Returns:
            ``(mount name, level, text)`` triples.
        """
        return [(m.name, level, text) for m in self.mounts for level, text in m.findings()]


def _why_not_up(mount: Mount) -> str | None:
    """Why an external server serves no call now (its supervisor's line), or None when up."""
    if mount.supervisor is None or mount.state == "up":
        return None
    return mount.supervisor.unavailable() or f"server {mount.name!r} is {mount.state}"


async def compose(
    loaded: LoadedConfig,
    *,
    strict: bool = False,
    only: set[str] | None = None,
    grace: float | None = None,
    stdio_client: bool = False,
    one_shot: bool = False,
    telemetry: Telemetry | None = None,
    pins: PinGate | None = None,
) -> Composition:
    """Build every enabled server (or those named in *only*), mount it, list what it exposes
    and refuse bad names.

    One step: a :class:`Composition` that exists can be served as it is (call
    :meth:`Composition.aclose` when done with it). External servers are started
    or reached here; one that fails is skipped, unless it is ``required`` or
    *strict* is set.

    Args:
        loaded: The validated config (:func:`~..config.load_config`).
        strict: Fail instead of skipping a server that cannot start.
        only: The mount names to build; all enabled servers when ``None``.
        grace: Seconds to wait for external servers still starting; then one that is not
            ``required`` is mounted with nothing listed (:attr:`Mount.late`), so serving
            begins, and its lists follow when it is up. ``None``: wait for each to start.
        telemetry: Observes every call; default: what the config's ``telemetry`` asks for.
        pins: Judges every definition; default: the config's ``pins`` and lock file.
        stdio_client: A stdio client will connect once serving starts: a server's
            ``roots/list`` sent before then waits for it instead of failing.
        one_shot: Only the launcher itself lists or calls (``--check``, ``tools``, ``call``):
            no client session gets a session of its own (``sessions: per_client``).

    Returns:
        The composed server with its mounts and the servers skipped (and why).

    Raises:
        ConfigError: A server's settings are wrong.
        CompositionError: Tools cannot be served together (a name collision, a bad name).
        ServerStartError: A required server (any, with *strict*) cannot start.
    """
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
        if not stdio_client:  # (servers asking for roots at their start wait for none)
            registry.fronts.no_lone_client()
        registry.fronts.own_sessions = not one_shot
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
        defer_state_store(root)
        exposure = Exposure()
        mounts = await mount_all(
            root, built, exposure=exposure, telemetry=telemetry, guards=guards, pins=pins
        )
        refuse_bad_names(mounts)
        mounts = exposure.assign_owners(mounts)
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
    registry.audience = Audience(composition)
    composition.watch_lists()
    Subscriptions(composition).install()
    # External servers' tool calls go straight over their sessions (per-call cost).
    relay = ToolRelay(root, composition, (SessionRegistry,))
    install_unlisted_calls(composition, relay)  # (after the relay in the chain)
    add_server_middleware(root, relay)
    install_own_lists(composition)
    install_unlisted_reads(composition)
    install_completions(composition)
    install_tasks(composition)
    install_prompt_links(composition)
    install_access(composition)  # (outside all of them: lists and items cut per caller)
    return composition
