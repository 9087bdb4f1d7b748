"""Reload: re-read the config on SIGHUP (or when ``--watch`` sees it change), apply only what changed.

An unchanged entry keeps its server instance and its child process; a removed
one is closed; a new or changed one is started. The new set is validated in
full first (the YAML, every setting, every tool name): a config that fails, or
would collide, changes nothing, and the launcher keeps serving the old one.
Connected clients are then told which of the tool, prompt and resource lists changed, if any.
"""

from __future__ import annotations

import logging
import signal
from contextlib import AsyncExitStack
from pathlib import Path

import anyio

from ...seams.fastmcp_server import remove_provider
from .. import hangups
from ..config.schema import ConfigError, LauncherConfig, load_config
from ..errors import LauncherError
from .building import ServerStartError, build_servers
from .composition import Composition
from .exposure import CompositionError, refuse_bad_names
from .instructions import merge_instructions
from .mount import Mount
from .mounting import exposed, listed_live, mount_into
from .pinning import reread
from .profile_gate import follow_names, gate_of
from .profile_names import plain_problems
from .profiles import PLAIN
from .sessions import registry_of

log = logging.getLogger("dpt-launch")

WATCH_INTERVAL = 1.0  # seconds between looks at the config file's mtime


class ReloadError(LauncherError):
    """The new config was refused; the old composition keeps serving."""


async def apply(composition: Composition, path: Path | None = None) -> str:
    """Re-read the config and swap in what changed; returns a one-line summary."""
    path = path or composition.loaded.path
    before = (composition.loaded.config, _pinned(composition), composition.mounts)
    try:
        loaded = load_config(path)
    except ConfigError as exc:
        raise ReloadError(str(exc)) from None
    try:
        restore_pins = reread(composition, loaded)  # (the kept servers are listed again below)
    except ConfigError as exc:
        raise ReloadError(str(exc)) from None
    old = {mount.name: mount for mount in composition.mounts}
    wanted = {name: e for name, e in loaded.config.servers.items() if e.enabled}
    kept = {name for name, entry in wanted.items() if name in old and old[name].entry == entry}
    started = set(wanted) - kept
    removed = set(old) - kept

    stack = AsyncExitStack()  # undoes what this reload started if it is refused
    built: list[Mount] = []
    try:
        registry = registry_of(composition.root)
        built, skipped = await build_servers(
            loaded,
            composition.group,
            stack,
            strict=composition.strict,
            only=started,
            fronts=registry.fronts if registry is not None else None,
        )
        exposure = composition.exposure
        fresh = {
            m.name: await mount_into(
                m,
                exposure=exposure,
                telemetry=composition.telemetry,
                guards=composition.guards,
                pins=composition.pins,
            )
            for m in built
        }
        for mount in built:
            if mount.supervisor is None and mount.server is not None:
                await _start_lifespan(composition, stack, fresh[mount.name])
        live = {name: await _listed_now(old[name]) for name in kept}
        ordered = [live[n] if n in kept else fresh[n] for n in wanted if n in kept or n in fresh]
        refuse_bad_names(ordered, fresh=set(fresh))
        refuse_plain_collisions(composition, ordered, set(fresh))
    except Exception as exc:  # whatever a new server raises, the old composition serves on
        restore_pins()
        for mount in built:
            if mount.supervisor is not None:
                mount.supervisor.stop()
        await stack.aclose()
        if isinstance(exc, ConfigError | CompositionError | ServerStartError):
            raise ReloadError(str(exc)) from None
        log.debug("reload failed", exc_info=True)
        raise ReloadError(f"a server failed to start: {type(exc).__name__}: {exc}"[:1000]) from None

    ordered = composition.exposure.assign_owners(ordered)  # (before a client can list the new ones)
    root = composition.root
    for name in removed:
        mount = old[name]
        if mount.provider is not None:
            remove_provider(root, mount.provider)
        if mount.supervisor is not None:
            mount.supervisor.stop()
    for name in started:
        provider = fresh[name].provider if name in fresh else None
        if provider is not None:
            root.add_provider(provider)
    composition.sessions.push_async_exit(stack)  # the new mounts' tasks live on with the rest
    composition.mounts = ordered
    composition.pins.forget(removed)
    follow_names(composition)
    composition.watch_lists()
    composition.skipped = skipped
    composition.loaded = loaded
    root.instructions = merge_instructions(loaded.config.instructions, ordered)
    registry = registry_of(root)
    changed = _changed_kinds(before, (loaded.config, _pinned(composition), ordered))
    told = await registry.notify_lists_changed(changed) if registry and changed else 0
    return (
        f"reloaded {path}: {len(kept)} kept, {len(fresh)} started, {len(removed)} removed"
        + (f", {len(skipped)} not mounted" if skipped else "")
        + f"; {told} client(s) told"
    )


def _pinned(composition: Composition) -> tuple[object, ...]:
    gate = composition.pins
    return (gate.policy, gate.pins, gate.lock_path)


def _changed_kinds(
    before: tuple[LauncherConfig, tuple[object, ...], list[Mount]],
    after: tuple[LauncherConfig, tuple[object, ...], list[Mount]],
) -> list[str]:
    """The lists a reload may have changed for a client: all of them when the config or the pins
    differ (profiles, access rules and filters decide what a client sees), else those a kept
    server lists differently now. A reload that changes nothing tells no client anything."""
    kinds = ["tools", "prompts", "resources"]
    if before[:2] != after[:2]:
        return kinds
    old, new = before[2], after[2]
    return [
        kind for kind in kinds if [exposed(m, kind) for m in old] != [exposed(m, kind) for m in new]
    ]


def refuse_plain_collisions(composition: Composition, mounts: list[Mount], fresh: set[str]) -> None:
    """A new server whose tool would be shown to clients under another tool's name (names
    every client takes, for connections naming no profile) refuses the reload, as at launch."""
    gate = gate_of(composition.root)
    if gate is not None and gate.default not in (None, PLAIN):
        return
    problems = plain_problems(mounts, fresh)
    if problems:
        raise CompositionError(problems[0])


async def _listed_now(mount: Mount) -> Mount:
    """A kept server's lists as it has them now: a reload checks the new servers against these,
    not against what it listed when it started."""
    try:
        return await listed_live(mount)
    except Exception as exc:  # (a server that cannot list now keeps what it exposed)
        log.debug("servers.%s: could not list it for the reload: %s", mount.name, exc)
        return mount


async def _start_lifespan(composition: Composition, stack: AsyncExitStack, mount: object) -> None:
    """Run a newly added in-process server's lifespan in a task of its own until it is removed."""
    provider = mount.provider  # type: ignore[attr-defined]
    stop = anyio.Event()
    stack.callback(stop.set)

    async def keep(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with provider.lifespan():
            task_status.started()
            await stop.wait()

    await composition.group.start(keep)


async def reload_now(composition: Composition) -> str:
    """Reload as SIGHUP does (the console, after it wrote the lock file); the line logged."""
    if composition.reload_lock is None:
        composition.reload_lock = anyio.Lock()
    # (one at a time: a SIGHUP and a file change must not start one server twice)
    async with composition.reload_lock:
        try:
            line = await apply(composition)
        except ReloadError as exc:
            line = f"reload refused, still serving the previous config: {exc}"
            log.error("%s", line)
            return line
        log.warning("%s", line)
        return line


async def watch(composition: Composition) -> None:
    """Reload on SIGHUP, and when the config file's mtime changes if ``composition.watch``."""
    if composition.reload_lock is None:
        composition.reload_lock = anyio.Lock()
    async with anyio.create_task_group() as group:
        group.start_soon(_on_sighup, composition)
        if composition.watch:
            group.start_soon(_on_change, composition)
        if hangups.take():  # (a SIGHUP while the servers started)
            await reload_now(composition)


async def _on_sighup(composition: Composition) -> None:
    with anyio.open_signal_receiver(signal.SIGHUP) as signals:
        async for _ in signals:
            await reload_now(composition)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


async def _on_change(composition: Composition) -> None:
    def stamp() -> tuple[float | None, ...]:
        """The config's mtime, and its lock file's (``pins approve`` is served at once)."""
        loaded = composition.loaded
        paths = (loaded.path, loaded.config.pins.lock_path(loaded.base_dir))
        return tuple(_mtime(path) for path in paths)

    last = stamp()
    while True:
        await anyio.sleep(WATCH_INTERVAL)
        now = stamp()
        if now[0] is not None and now != last:
            last = now
            await reload_now(composition)
