"""``dpt-launch``'s exit statuses and its one-line error, shared by every verb and ``connect``."""

from __future__ import annotations

import sys

EXIT_OK = 0  # a clean stop, or the verb did what was asked
EXIT_FAILURE = 1  # a server failed to start, a tool call was refused, output was lost
EXIT_USAGE = 2  # a bad config or command line


def fail(message: str, status: int, prog: str = "dpt-launch") -> int:
    """Print ``PROG: error: MESSAGE`` to stderr (stdout may be the protocol) and return *status*."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status
