"""What the console reads of the composition, handed in by ``cli/serve.py`` as callables (the
transports layer cannot import ``compose``): nothing here does work until a page asks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...calls.audit import AuditLog
from ...calls.pin_gate import PinGate


def _no_counts() -> dict[str, int]:
    return {}


def _no_lines() -> dict[str, str]:
    return {}


def _no_metrics() -> Any:
    return None


@dataclass
class ConsoleSources:
    """The daemon's state as the console shows it.

    *states*: each server's state (``/ready``'s); *restarts*: how often each external server was
    started again; *last_errors*: why its last session ended; *upstream_sessions*: how many
    sessions to it are open; *tool_counts*: how many tools each mounted server exposes;
    *audit*: the audit log to follow (None: Activity says there is none); *pins*: the composition's gate, *served*
    what each mounted server lists now, and *reload* what reloads the launcher after the lock file
    was written (returns the reload's one line); *entries*: the configured servers by name (an
    OAuth one gets a "Log in" button); *search*: ``search_tools``'s ranking (tools, query, limit
    to names, best first); *metrics*: the launcher's ``Metrics`` (None: off).
    """

    states: Callable[[], Mapping[str, Mapping[str, Any]]]
    restarts: Callable[[], Mapping[str, int]] = _no_counts
    last_errors: Callable[[], Mapping[str, str]] = _no_lines
    upstream_sessions: Callable[[], Mapping[str, int]] = _no_counts
    tool_counts: Callable[[], Mapping[str, int]] = _no_counts
    audit: AuditLog | None = None
    pins: PinGate | None = None
    served: Callable[[], Mapping[str, Any]] = field(default=dict)
    reload: Callable[[], Awaitable[str]] | None = None
    entries: Callable[[], Mapping[str, Any]] = field(default=dict)
    search: Callable[[Sequence[Any], str, int], list[str]] | None = None
    metrics: Callable[[], Any] = _no_metrics
