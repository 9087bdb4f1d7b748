"""The Servers page's rows: what an operator reads of each server's state."""

from __future__ import annotations

from doc_processing_std_tools.launcher.transports.console.server_rows import server_rows
from doc_processing_std_tools.launcher.transports.console.sources import ConsoleSources


def test_a_row_says_state_why_restarts_last_error_tools_sessions_and_login() -> None:
    sources = ConsoleSources(
        states=lambda: {
            "fs": {"state": "up", "required": True},
            "gh": {"state": "restarting", "required": False, "reason": "restarting: EOF"},
            "corp": {"state": "needs-login", "reason": "server 'corp' needs a login"},
            "old": {"state": "failed", "reason": "command not found"},
        },
        restarts=lambda: {"gh": 3, "corp": 0, "old": 0},
        last_errors=lambda: {"gh": "connection lost", "corp": "", "old": "command not found"},
        upstream_sessions=lambda: {"gh": 0, "corp": 0, "old": 0},
        tool_counts=lambda: {"fs": 14, "gh": 5},
    )
    rows = {row["name"]: row for row in server_rows(sources, frozenset({"corp"}))}
    assert (rows["fs"]["state"], rows["fs"]["tools"], rows["fs"]["restarts"]) == ("up", 14, None)
    assert rows["gh"]["restarts"] == 3 and rows["gh"]["last_error"] == "connection lost"
    assert rows["corp"]["login"] and not rows["gh"]["login"]
    assert (rows["old"]["state"], rows["old"]["detail"]) == ("unavailable", "failed")
    assert rows["old"]["last_error"] == ""  # (the same as the reason: said once)
    assert list(rows) == ["corp", "fs", "gh", "old"]
