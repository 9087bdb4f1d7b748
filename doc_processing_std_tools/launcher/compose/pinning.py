"""The pins of a composition: its :class:`~..calls.pin_gate.PinGate` made from the config's
``pins:`` and lock file, read again at reload, and what the verbs, ``--check``, ``/ready`` and
``/metrics`` read of it.

The gate itself sits in every mounted server's listing (``calls/policed_tools.py``): this module
only decides which lock file it judges by.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..calls.pin_gate import PinGate
from ..calls.pins import LockFile, PinError, Served
from ..config.schema import ConfigError, LoadedConfig


class Composition(Protocol):
    """What this module reads of a composition (``compose/composition.py`` imports this one)."""

    @property
    def pins(self) -> PinGate: ...

    @property
    def mounts(self) -> Sequence[Any]: ...


def read_pins(loaded: LoadedConfig) -> LockFile | None:
    """The config's lock file, or None when there is none. Raises :class:`ConfigError` when it
    exists but cannot be used (a launcher must not serve unchecked definitions then)."""
    path = loaded.config.pins.lock_path(loaded.base_dir)
    if not path.exists():
        return None
    try:
        return LockFile.read(path)
    except PinError as exc:
        raise ConfigError(str(exc)) from None


def gate_for(loaded: LoadedConfig) -> PinGate:
    """A gate judging by *loaded*'s lock file under its ``pins.policy``."""
    config = loaded.config.pins
    return PinGate(config.policy, read_pins(loaded), config.lock_path(loaded.base_dir), loaded.path)


def reread(composition: Composition, loaded: LoadedConfig) -> Callable[[], None]:
    """A reload: judge by *loaded*'s lock file from now on (before the servers are listed
    again). Returns what puts the previous one back, for a reload that is refused."""
    gate = composition.pins
    before = (gate.policy, gate.pins, gate.lock_path)
    config = loaded.config.pins
    gate.use(config.policy, read_pins(loaded), config.lock_path(loaded.base_dir))

    def restore() -> None:
        gate.use(*before)

    return restore


def served(composition: Composition) -> Served:
    """Every mounted server's definitions as it last listed them (all of them, approved or not;
    those the server's ``tools:`` filter leaves out excluded)."""
    names = {mount.name for mount in composition.mounts}
    return {name: kinds for name, kinds in composition.pins.served.items() if name in names}


def check_findings(composition: Composition) -> list[tuple[str, str, str]]:
    """``--check``'s lines: one WARN per definition that is not served as it is (or is
    served only under ``warn``), one per server the lock file has no entry for, and how many
    drifted."""
    gate = composition.pins
    found = gate.findings()
    if not found:
        return []
    action = {
        "block": "not served",
        "warn": "served anyway (pins.policy: warn)",
    }[gate.policy]
    lock = gate.lock_name
    # a server the lock file has no entry for: its definitions not pinned in one line, as the log
    folded = Counter(
        f.server for f in found if f.problem == "not pinned" and gate.unpinned(f.server)
    )
    lines = [
        ("", "WARN", f"{f.line()}: {'gone' if f.problem == 'removed' else action}")
        for f in found
        if not (f.problem == "not pinned" and f.server in folded)
    ]
    for server, count in sorted(folded.items()):
        lines.append(
            (
                "",
                "WARN",
                f"servers.{server} has no entry in {lock}: its {count} definition(s) "
                f"{action}; dpt-launch pins diff, then pins approve {server}",
            )
        )
    if gate.pins is None:
        lines.append(("", "WARN", f"{len(found)} definition(s) drifted: they hold hidden text"))
    else:
        lines.append(
            (
                "",
                "WARN",
                f"{len(found)} definition(s) drifted from {lock}: dpt-launch pins diff shows them",
            )
        )
    return lines
