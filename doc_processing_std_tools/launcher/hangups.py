"""A SIGHUP before serving starts: remembered, not fatal.

SIGHUP's default action ends the process, and a client (or an operator's ``kill -HUP``) may send
one while the launcher still starts its servers; the handler installed here only remembers it,
and the reload watcher (:mod:`.compose.reload`) reloads once serving has begun. Installed before
the external commands start, a leaf any layer may use (no fastmcp import on the way).
"""

from __future__ import annotations

import signal

_asked = False  # a SIGHUP came before the reload watcher ran


def defer() -> None:
    """Until the reload watcher takes over, a SIGHUP only asks for one reload once serving."""
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _remember)


def _remember(signum: int, frame: object) -> None:
    global _asked
    _asked = True


def take() -> bool:
    """Whether a SIGHUP came before serving (and forget it: it asks for one reload)."""
    global _asked
    asked, _asked = _asked, False
    return asked
