"""Start an external server's command so that neither it nor anything it starts outlives the launcher.

Run as ``python -I -S child.py PARENT_PID COMMAND ARGS...`` (stdlib only, so it
starts in a few milliseconds). The mcp SDK starts it in a session and process
group of its own. It asks Linux to send it SIGTERM when the launcher dies, even by
SIGKILL (``PR_SET_PDEATHSIG``), then runs the command as its child and waits.
A signal that reaches it ends the whole process group: SIGTERM first, SIGKILL for
whatever is left after a grace period. (``PR_SET_PDEATHSIG`` kept across an
``exec`` would reach the command alone: a shell wrapper's own children, or a
server that ignores SIGTERM, outlived a killed launcher.) When the command exits,
what it left behind in the group is sent SIGTERM, and the shim exits with the
command's status. The shim holds no copy of the protocol's pipes, so the
launcher sees the command's stdout close when it exits.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

PR_SET_PDEATHSIG = 1
GRACE = 2.0  # seconds the group has after SIGTERM before SIGKILL


def wrapped_command(command: str, args: list[str]) -> tuple[str, list[str]]:
    """The command and arguments that run *command* through this shim (Linux only)."""
    if not sys.platform.startswith("linux"):
        return command, args
    return sys.executable, ["-I", "-S", str(Path(__file__)), str(os.getpid()), command, *args]


def main(argv: list[str]) -> None:
    import ctypes

    parent, command, *args = argv
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):  # the launcher died before the request took effect
        sys.exit(1)
    if os.getpgid(0) != os.getpid():  # not a group of our own: ending "the group" would be wrong
        _exec(command, args)
    pid = os.fork()
    if pid == 0:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # (not inherited: if the shim is killed)
        _exec(command, args)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: _end_group(pid))
    _, status = os.waitpid(pid, 0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)  # what the command left running (not the shim: ignored)
    sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _exec(command: str, args: list[str]) -> NoReturn:
    try:
        os.execvp(command, [command, *args])
    except OSError as exc:
        print(f"cannot run {command!r}: {exc.strerror}", file=sys.stderr, flush=True)
    os._exit(127)


def _end_group(pid: int) -> NoReturn:
    """The launcher died or asked us to stop: SIGTERM to the group, SIGKILL after the grace."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
        except ChildProcessError:
            break
        time.sleep(0.05)
    os.killpg(0, signal.SIGKILL)  # the rest of the group, and the shim itself
    os._exit(1)  # (not reached)


if __name__ == "__main__":
    main(sys.argv[1:])
