"""The Pins page's rows (each drifted definition with its diff) and its "Approve" action, over
the composition's pin gate (``calls/pin_gate.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...calls.pins import LockFile, definition_diff
from .sources import ConsoleSources


def drifted_rows(sources: ConsoleSources) -> list[dict[str, Any]]:
    """Each finding of the gate: its key, its line, and the diff of approved to served."""
    gate = sources.pins
    if gate is None:
        return []
    served = sources.served()
    rows = []
    for finding in gate.findings():
        pinned = (gate.pins.servers if gate.pins else {}).get(finding.server, {})
        before = pinned.get(finding.kind, {}).get(finding.name)
        after = served.get(finding.server, {}).get(finding.kind, {}).get(finding.name)
        rows.append(
            {
                "key": finding.key,
                "line": finding.line(),
                "problem": finding.problem,
                "diff": definition_diff(finding.kind, before, after, finding.key),
            }
        )
    return rows


def approve_served(lock_path: Path, sources: ConsoleSources, only: str | None) -> list[str]:
    """``dpt-launch pins approve [ONLY]``: the served definitions into the lock file at
    *lock_path*; the keys taken (raises ``PinError`` or ``OSError``)."""
    lock = LockFile.read(lock_path) if lock_path.exists() else LockFile()
    taken = lock.approve(dict(sources.served()), only=only)
    if taken:
        lock.write(lock_path)
    return taken
