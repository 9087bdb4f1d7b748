"""The plain form, ``dpt-launch --config F``: compose every server, then report (``--check``)
or install the profiles and serve, all in one event loop."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import sys
from typing import Any

from rich.console import Console

from ... import locking
from ..compose import CompositionError, ServerStartError, compose
from ..compose.pinning import check_findings
from ..compose.profile_gate import install_profiles
from ..compose.profile_names import plain_problems, profile_problems
from ..compose.profiles import ProfileError, known_profiles
from ..config.schema import ConfigError, LoadedConfig
from ..config.transport import TransportConfig
from .serve import bind, serve
from .status import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .status import fail as _fail

log = logging.getLogger("dpt-launch")


async def run(args: argparse.Namespace, loaded: LoadedConfig, transport: TransportConfig) -> int:
    """Compose, then report (``--check``) or serve, all in one event loop."""
    try:
        # stdout belongs to the protocol: a server that prints while it is imported or
        # built writes to stderr instead.
        with contextlib.redirect_stdout(sys.stderr), progress(loaded):
            grace = None if args.check else loaded.config.start_grace
            stdio_client = not args.check and transport.type == "stdio"
            composition = await compose(
                loaded,
                strict=args.strict,
                grace=grace,
                stdio_client=stdio_client,
                one_shot=args.check,
            )
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except CompositionError as exc:
        return _fail(f"{loaded.path}: {exc}", EXIT_USAGE)
    except ServerStartError as exc:
        return _fail(f"{loaded.path}: {exc}", EXIT_FAILURE)
    gc.freeze()
    gc.enable()
    composition.watch, composition.strict = args.watch, args.strict
    try:
        return await _report_or_serve(args, loaded, transport, composition)
    finally:
        await composition.aclose()


def lock_findings() -> list[tuple[str, str, str]]:
    """``--check``'s line for the fleet lock (``lock:``): FAIL when its Redis cannot be used."""
    fleet = locking.fleet_lock_in_use()
    problem = fleet.problem() if fleet is not None else None
    return [("lock", "FAIL", problem)] if problem else []


async def _report_or_serve(
    args: argparse.Namespace, loaded: LoadedConfig, transport: TransportConfig, composition: Any
) -> int:
    for name, why in composition.skipped:
        log.warning("servers.%s not mounted: %s", name, why)
    findings = composition.findings()

    if args.check:
        # A server that was skipped (a missing extra) will not serve either.
        findings += [(name, "FAIL", why) for name, why in composition.skipped]
        wanted = [*loaded.config.profiles, *([args.profile] if args.profile else [])]
        findings += [
            (f"profiles.{name}", "FAIL", why)
            for name, why in profile_problems(composition, list(dict.fromkeys(wanted)))
        ]
        findings += [  # (a server that needs a login serves its cached list; calls say so)
            (m.name, "WARN", m.supervisor.unavailable() or "")
            for m in composition.mounts
            if m.state == "needs-login" and m.supervisor is not None
        ]
        findings += lock_findings()
        findings += check_findings(composition)  # (definitions not as approved: pins)
        if not args.profile:
            findings += [("", "FAIL", why) for why in plain_problems(composition.mounts)]
        # here, not at the top: ~2 ms of rich's tables, paid only by --check
        from .report import print_check

        print_check(loaded, composition, transport, findings)
        return EXIT_FAILURE if any(level == "FAIL" for _, level, _ in findings) else EXIT_OK

    for name, level, text in findings:
        if level == "FAIL":
            return _fail(f"{loaded.path}: servers.{name}: {text}", EXIT_USAGE)
        log.warning("servers.%s: %s", name, text)

    served = known_profiles(loaded.config) if transport.type == "http" else []
    try:
        install_profiles(composition, served, args.profile)
    except ProfileError as exc:
        return _fail(f"{loaded.path}: {exc}", EXIT_USAGE)

    listener = None
    if transport.type == "http":
        try:
            listener = bind(transport.host, transport.port)
        except OSError as exc:
            where = f"{transport.host}:{transport.port}"
            return _fail(f"cannot listen on {where}: {exc.strerror or exc}", EXIT_FAILURE)
    await serve(composition, transport, listener)
    return EXIT_OK


def progress(loaded: LoadedConfig) -> contextlib.AbstractContextManager[Any]:
    """A spinner on a terminal's stderr while external servers start (they can take seconds)."""
    external = [n for n, e in loaded.config.servers.items() if e.enabled and e.external]
    if not external or not sys.stderr.isatty():
        return contextlib.nullcontext()
    names = ", ".join(external)
    return Console(stderr=True).status(f"starting external servers: {names}")
