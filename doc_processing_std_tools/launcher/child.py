"""Start an external server's command so that it cannot outlive the launcher.

Run as ``python -I -S child.py PARENT_PID COMMAND ARGS...`` (stdlib only, so it
starts in a few milliseconds): it asks Linux to send it SIGTERM when the launcher
dies, even by SIGKILL (``PR_SET_PDEATHSIG``, kept across ``exec``), then becomes
the command. The mcp SDK already starts it in a session and process group of its
own and, on a clean stop, ends the whole group (closes stdin, then SIGTERM, then
SIGKILL).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1


def wrapped_command(command: str, args: list[str]) -> tuple[str, list[str]]:
    """The command and arguments that run *command* through this shim (Linux only)."""
    if not sys.platform.startswith("linux"):
        return command, args
    return sys.executable, ["-I", "-S", str(Path(__file__)), str(os.getpid()), command, *args]


def main(argv: list[str]) -> None:
    import ctypes

    parent, command, *args = argv
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):  # the launcher died before the request took effect
        sys.exit(1)
    try:
        os.execvp(command, [command, *args])
    except OSError as exc:
        print(f"cannot run {command!r}: {exc.strerror}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
