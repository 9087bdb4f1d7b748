"""The Servers page's rows: each server's state as an operator reads it, from the sources."""

from __future__ import annotations

from typing import Any

from .sources import ConsoleSources

# /ready's states, as the page names them: a server that serves nothing is "unavailable".
SHOWN_STATE = {"failed": "unavailable", "skipped": "unavailable"}


def server_rows(
    sources: ConsoleSources, oauth: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """One row per server, by name: state, why, restarts, last error, tools, upstream sessions.

    *oauth*: the servers whose login the console can run (a "Log in" button when they need one).
    """
    restarts, counts = sources.restarts(), sources.tool_counts()
    errors, sessions = sources.last_errors(), sources.upstream_sessions()
    rows = []
    for name, state in sorted(sources.states().items()):
        raw = str(state.get("state", "?"))
        shown = SHOWN_STATE.get(raw, raw)
        reason = str(state.get("reason", ""))
        last_error = errors.get(name, "")
        rows.append(
            {
                "name": name,
                "state": shown,
                "detail": raw if raw != shown else "",
                "required": bool(state.get("required")),
                "reason": reason,
                "drifted": state.get("drifted", 0),
                "restarts": restarts.get(name),
                "last_error": "" if last_error == reason else last_error,
                "tools": counts.get(name),
                "sessions": sessions.get(name),
                "login": shown == "needs-login" and name in oauth,
            }
        )
    return rows
