"""A server whose tool answers who is calling, as the launcher's transport names the caller
(``transports.identity.current_subject``): what per-user upstream tokens are keyed by."""

from __future__ import annotations

from fastmcp import FastMCP

from doc_processing_std_tools.launcher.transports.identity import current_subject

whoami_server = FastMCP("whoami")


@whoami_server.tool
def whoami() -> str:
    """The caller's subject, or "-" for the daemon's own identity."""
    return current_subject() or "-"
