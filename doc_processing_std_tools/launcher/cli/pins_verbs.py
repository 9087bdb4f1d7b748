"""``dpt-launch pin`` and ``dpt-launch pins diff|approve``: the lock file of approved definitions
(docs/trust.md#pinned-definitions).

Each builds the servers as ``--check`` does and reads what they serve; nothing is served.
``pin`` writes the lock file from what is served (the entries of servers the config does not
mount are kept: another config may share the file), ``pins diff`` shows what differs from it (exit 1 when
anything does), ``pins approve`` takes the served definitions (all, a server's, or one).
A running launcher reads the lock file again when it reloads (SIGHUP, or ``--watch``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..calls.pin_gate import PinGate
from ..calls.pins import (
    KINDS,
    Finding,
    LockFile,
    PinError,
    Served,
    definition_diff,
    drift,
    hidden_characters,
    pinned_part,
    shown,
)
from ..compose.pinning import served
from ..config.schema import ConfigError, LoadedConfig, load_config
from .status import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .status import fail as _fail
from .tool_verbs import composed

WHAT = {"tools": "tool", "prompts": "prompt", "resourceTemplates": "resource template"}


def parse(verb: str, argv: list[str], default_config: str) -> argparse.Namespace:
    if verb == "pin":
        parser = argparse.ArgumentParser(
            prog="dpt-launch pin",
            description="Write the lock file (pins.lock_file, default tools.lock beside the "
            "config) from the definitions every server serves now.",
        )
        parser.add_argument("-c", "--config", default=default_config, help="the YAML config")
        return parser.parse_args(argv)
    parser = argparse.ArgumentParser(prog="dpt-launch pins")
    actions = parser.add_subparsers(dest="action", required=True)
    diff = actions.add_parser(
        "diff", help="per definition, what the servers serve now against the lock file"
    )
    approve = actions.add_parser("approve", help="take the served definitions into the lock file")
    approve.add_argument(
        "target", nargs="?", metavar="SERVER[.NAME]", help="one server, or one of its definitions"
    )
    for sub in (diff, approve):
        sub.add_argument("-c", "--config", default=default_config, help="the YAML config")
    return parser.parse_args(argv)


async def run(verb: str, args: argparse.Namespace) -> int:
    try:
        loaded = load_config(args.config)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    path = loaded.config.pins.lock_path(loaded.base_dir)
    pins: LockFile | None = None
    if verb == "pins":
        try:
            pins = LockFile.read(path)
        except PinError as exc:
            if args.action == "diff" or path.exists():
                return _fail(str(exc), EXIT_USAGE)
    # (a gate with no lock file: it records every definition, and reports hidden text only)
    composition = await composed(loaded, pins=PinGate(loaded.config.pins.policy))
    if isinstance(composition, int):
        return composition
    try:
        now = served(composition)
        skipped = [name for name, _why in composition.skipped]
    finally:
        await composition.aclose()
    if verb == "pin":
        return _pin(loaded, now, skipped)
    if args.action == "diff":
        assert pins is not None
        return _diff(loaded, pins, now)
    return _approve(loaded, pins or LockFile(), now, args.target)


def _pin(loaded: LoadedConfig, now: Served, skipped: list[str]) -> int:
    path = loaded.config.pins.lock_path(loaded.base_dir)
    pins = LockFile()
    pins.approve(now)
    try:
        before = LockFile.read(path) if path.exists() else None
    except PinError:
        before = None
    # A server that did not start, and one this config does not mount (a lock file shared by
    # two configs in one folder), keeps its entries: they approve only what a person approved.
    earlier = before.servers if before is not None else {}
    kept = sorted(set(earlier) - set(now))  # (now: every mounted server that started)
    others = [name for name in kept if name not in skipped]
    for name in kept:
        pins.servers[name] = earlier[name]
        if name in skipped:
            print(f"servers.{name} did not start: its pins are kept as they were", file=sys.stderr)
    if others:
        print(
            f"kept the pins of {len(others)} server(s) this config does not mount "
            f"({', '.join(others)}); delete {path.name} and pin again to drop them",
            file=sys.stderr,
        )
    _write(pins, path)
    counts = {
        kind: sum(len(kinds.get(kind, {})) for kinds in pins.servers.values()) for kind in KINDS
    }
    print(
        f"wrote {path}: {counts['tools']} tool(s), {counts['prompts']} prompt(s) and "
        f"{counts['resourceTemplates']} resource template(s) of {len(pins.servers)} server(s)"
    )
    _warn_hidden(now)
    return EXIT_OK


def _diff(loaded: LoadedConfig, pins: LockFile, now: Served) -> int:
    path = loaded.config.pins.lock_path(loaded.base_dir)
    found = [finding for server in sorted(now) for finding in drift(pins, server, now[server])]
    for finding in found:
        print(finding.line())
        pinned = pins.servers.get(finding.server, {}).get(finding.kind, {}).get(finding.name)
        current = now.get(finding.server, {}).get(finding.kind, {}).get(finding.name)
        if finding.problem == "hidden text" and current is not None:
            text = json.dumps(pinned_part(finding.kind, current), indent=2, ensure_ascii=False)
            for line in text.splitlines():  # (each line holding some, made visible)
                if hidden_characters(line):
                    print(f"  {shown(line.strip())}")
        else:
            sys.stdout.write(definition_diff(finding.kind, pinned, current, finding.key))
        print()
    if not found:
        print(f"no drift: every served definition matches {path}")
        return EXIT_OK
    print(
        f"{len(found)} definition(s) drifted from {path}; take what is served with "
        "dpt-launch pins approve [SERVER[.NAME]]"
    )
    return EXIT_FAILURE


def _approve(loaded: LoadedConfig, pins: LockFile, now: Served, target: str | None) -> int:
    path = loaded.config.pins.lock_path(loaded.base_dir)
    if target is not None and not _names_something(pins, now, target):
        return _fail(
            f"{target!r} names no mounted server nor a definition of one (SERVER or SERVER.NAME; "
            "see dpt-launch pins diff)",
            EXIT_USAGE,
        )
    taken = pins.approve(now, only=target)
    if not taken:
        print(f"nothing to approve: {path} already holds what is served")
        return EXIT_OK
    _write(pins, path)
    for key in taken:
        print(f"approved {key}")
    print(f"wrote {path}; a running launcher serves them once it reloads (SIGHUP, or --watch)")
    _warn_hidden(now, target)
    return EXIT_OK


def _names_something(pins: LockFile, now: Served, target: str) -> bool:
    for server in {*now, *pins.servers}:
        if target == server and server in now:
            return True
        name = target.removeprefix(f"{server}.") if target.startswith(f"{server}.") else None
        if name is None:
            continue
        for kind in KINDS:
            if name in now.get(server, {}).get(kind, {}) or name in pins.servers.get(
                server, {}
            ).get(kind, {}):
                return True
    return False


def _warn_hidden(now: Served, target: str | None = None) -> None:
    """Hidden text is refused under ``block`` whatever the lock file says: say so."""
    hidden: list[Finding] = [
        finding
        for server in sorted(now)
        for finding in drift(None, server, now[server])
        if target is None or target in (server, finding.key)
    ]
    for finding in hidden:
        print(
            f"warning: {finding.line()}: not served under pins.policy block, approved or not",
            file=sys.stderr,
        )


def _write(pins: LockFile, path: Any) -> None:
    try:
        pins.write(path)
    except OSError as exc:
        raise PinError(f"{path}: cannot write the lock file: {exc.strerror or exc}") from None


def main(verb: str, argv: list[str], default_config: str) -> int:
    """``dpt-launch pin ...`` / ``dpt-launch pins ...``: its exit status."""
    import anyio

    args = parse(verb, argv, default_config)
    try:
        return anyio.run(run, verb, args)
    except PinError as exc:
        return _fail(str(exc), EXIT_FAILURE)
