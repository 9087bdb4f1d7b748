"""``dpt-launch``'s exit statuses, its one-line error and its tables' width, shared by every verb
and ``connect``."""

from __future__ import annotations

import os
import sys

EXIT_OK = 0  # a clean stop, or the verb did what was asked
EXIT_FAILURE = 1  # a server failed to start, a tool call was refused, output was lost
EXIT_USAGE = 2  # a bad config or command line


def fail(message: str, status: int, prog: str = "dpt-launch") -> int:
    """Print ``PROG: error: MESSAGE`` to stderr (stdout may be the protocol) and return *status*."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


def table_width() -> int | None:
    """The width for a table: the terminal's (or ``$COLUMNS``: None, rich reads it), else 120
    into a pipe or a file, where nothing wraps."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return None
    return 120
