"""Build every enabled server: resolve its source, validate its settings, build it (or start
an external one's supervisor); skip one the machine cannot serve, unless it must serve."""

from __future__ import annotations

import contextlib
import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

import anyio
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
from ..config.schema import ConfigError, LoadedConfig, ServerEntry, describe_validation_error
from ..errors import LauncherError
from ..external.wording import ExternalStartError
from ..transports.identity import current_subject
from .mount import Mount

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ..external.front import Fronts
    from ..external.supervisor import Supervisor

log = logging.getLogger("dpt-launch")

# seconds servers still starting are waited for, at least, after the last one came up
SETTLE_MARGIN = 0.5


class ServerStartError(LauncherError):
    """A server that must serve (``required``, or ``--strict``) could not be started."""


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
    (and not *strict*) are waited for as :func:`wait_for_starts` says, then mounted ``late`` if
    still starting.
    """
    found, skipped = resolve_sources(loaded)
    if only is not None:
        found = [item for item in found if item[0] in only]
        skipped = [item for item in skipped if item[0] in only]
    supervisors: dict[str, Supervisor] = {}
    began = anyio.current_time()
    if any(entry.external for _name, entry, _source in found):
        # Imported here: fastmcp's client (its auth module, key_value, beartype) costs 0.3 s of a
        # 0.75 s launcher import (python -X importtime), which in-process servers need none of.
        from ..external.supervisor import Supervisor
    for name, entry, _source in found:
        if entry.external:
            supervisor = supervisors[name] = Supervisor(name, entry, loaded.base_dir, fronts)
            if entry.session_mode == "per_user":  # (an OAuth server's: the user's own login)
                supervisor.subject = current_subject
            sessions.callback(supervisor.close)
            group.start_soon(supervisor.run)

    built: dict[str, Mount] = {}
    for name, entry, spec in found:  # (in-process servers build while external ones start)
        if spec is not None:
            mount = _build_one(loaded, name, entry, spec, skipped)
            if mount is not None:
                built[name] = mount
    if grace is not None and not strict:
        await wait_for_starts(list(supervisors.values()), began, grace)
    mounts: list[Mount] = []
    for name, entry, spec in found:
        if spec is not None:
            if name in built:
                mounts.append(built[name])
            continue
        supervisor = supervisors[name]
        try:
            # (a server past its start, up or failed, is waited for too: a failure raises)
            if grace is None or entry.required or strict or supervisor.state != "starting":
                await supervisor.wait_started()
        except ExternalStartError as exc:
            skipped.append((name, str(exc)))
            continue
        late = supervisor.state == "starting"
        if late:
            log.info("servers.%s is still starting: its tools are listed when it is up", name)
        mounts.append(Mount(name, None, entry, None, supervisor.proxy(), supervisor, late=late))
    for name, why in skipped:
        entry = loaded.config.servers[name]
        if entry.required or strict:
            for mount in mounts:
                if mount.supervisor is not None:
                    mount.supervisor.stop()
            raise ServerStartError(f"servers.{name}: {why}")
    return mounts, skipped


def _build_one(
    loaded: LoadedConfig,
    name: str,
    entry: ServerEntry,
    spec: ServerSpec,
    skipped: list[tuple[str, str]],
) -> Mount | None:
    """Build one in-process server, or add why not to *skipped* (None)."""
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
        return None
    try:
        server = spec.build(settings)
    except ServerLoadError as exc:
        if isinstance(exc, ServerUnavailable) or exc.extra:
            skipped.append((name, str(exc)))
            return None
        raise loaded.error(("servers", name), str(exc)) from None
    except TypeError as exc:  # a factory refusing its settings is a config error
        raise loaded.error(
            ("servers", name), f"cannot build {spec.name}: {type(exc).__name__}: {exc}"
        ) from None
    except Exception as exc:  # whatever else a factory raises is reported, not traced
        skipped.append((name, f"cannot build {spec.name}: {type(exc).__name__}: {exc}"))
        return None
    return Mount(name, spec, entry, settings, server, problems=tuple(problems))


async def wait_for_starts(supervisors: list[Supervisor], began: float, grace: float) -> None:
    """Wait while external servers start, so that the first list holds what is ready.

    Ends when every one has settled (up, failed, or needing a login); or, once one has, when
    half as long again as the last one to settle took since *began* (at least
    :data:`SETTLE_MARGIN`) has passed without another settling: one still starting then is
    late (a hung server does not hold every client's first list); or *grace* seconds
    (``start_grace``) after *began*.
    """
    deadline = began + grace
    last: float | None = None
    settled = anyio.Event()

    async def watch(supervisor: Supervisor) -> None:
        nonlocal last, settled
        with contextlib.suppress(ExternalStartError):
            await supervisor.wait_started()
        last = anyio.current_time()
        settled.set()
        settled = anyio.Event()

    async with anyio.create_task_group() as group:
        for supervisor in supervisors:
            group.start_soon(watch, supervisor)
        while any(s.state == "starting" for s in supervisors):
            until = deadline
            if last is not None:
                until = min(deadline, last + max(SETTLE_MARGIN, (last - began) / 2))
            if anyio.current_time() >= until:
                break
            with anyio.move_on_after(until - anyio.current_time()):
                await settled.wait()
        group.cancel_scope.cancel()


def unavailable_reason(problems: Findings) -> str | None:
    """The environmental problems among a server's ``check`` findings, as one line, or None."""
    reasons = [text for level, text in problems if level == UNAVAILABLE]
    return "; ".join(reasons) if reasons else None
