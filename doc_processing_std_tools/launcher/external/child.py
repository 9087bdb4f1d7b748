"""Start an external server's command so that neither it nor anything it starts outlives the launcher.

Run as ``python -I -S child.py PARENT_PID COMMAND ARGS...`` (stdlib only, so it
starts in a few milliseconds). The mcp SDK starts it in a session and process
group of its own. It asks Linux to send it SIGTERM when the launcher dies, even by
SIGKILL (``PR_SET_PDEATHSIG``), and to make it the **child subreaper** of what it
starts (``PR_SET_CHILD_SUBREAPER``): a descendant whose parent exits, even one that
called ``setsid()`` and forked twice to leave the group, becomes the shim's child
instead of init's. It runs the command as its child and waits. When the command
exits, or a signal reaches the shim (the launcher died or asks it to stop), it ends
every descendant, found through ``/proc`` by parent links: SIGTERM first, SIGKILL
for whatever is left after a grace period, and only then exits (with the command's
status). (``PR_SET_PDEATHSIG`` kept across an ``exec`` would reach the command
alone: a shell wrapper's own children, or a server that ignores SIGTERM, outlived a
killed launcher.) The shim holds no copy of the protocol's pipes, so the launcher
sees the command's stdout close when it exits.

What it cannot end: a descendant that moved to another PID namespace (it is not in
our ``/proc`` view), or any descendant once the shim itself is SIGKILLed (then they
go to init, or to a subreaper above the launcher).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from contextlib import suppress

# typing and pathlib would add 1.5 MB to each shim's PSS (of 5.6 MB, /proc/PID/smaps_rollup): the
# shim imports neither; mypy treats MYPY as TYPE_CHECKING.
MYPY = False
if MYPY:
    from typing import NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GRACE = 1.5  # seconds descendants have after SIGTERM before SIGKILL (below the SDK's 2 s)
POLL = 0.05  # seconds between looks at what is left


def wrapped_command(command: str, args: list[str]) -> tuple[str, list[str]]:
    """The command and arguments that run *command* through this shim (Linux only)."""
    if not sys.platform.startswith("linux"):
        return command, args
    return sys.executable, ["-I", "-S", os.path.abspath(__file__), str(os.getpid()), command, *args]


def main(argv: list[str]) -> None:
    parent, command, *args = argv
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):  # the launcher died before the request took effect
        sys.exit(1)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    pid = os.fork()
    if pid == 0:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # (not inherited: if the shim is killed)
        _exec(command, args)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: _end_all(1))
    _, status = os.waitpid(pid, 0)
    _end_all(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _exec(command: str, args: list[str]) -> NoReturn:
    try:
        os.execvp(command, [command, *args])
    except OSError as exc:
        print(f"cannot run {command!r}: {exc.strerror}", file=sys.stderr, flush=True)
    os._exit(127)


def _descendants() -> list[int]:
    """Live processes whose parent chain leads to the shim (orphans were re-parented to it)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                fields = file.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _signal_all(signum: int, sent: set[int]) -> bool:
    """Send *signum* to each descendant not yet in *sent*; whether any is left."""
    pids = _descendants()
    for pid in pids:
        if pid not in sent:
            sent.add(pid)
            with suppress(OSError):  # (gone meanwhile)
                os.kill(pid, signum)
    return bool(pids)


def _reap() -> None:
    """Collect exited children (the command's, and orphans re-parented to the shim)."""
    with suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _end_all(code: int) -> NoReturn:
    """End every descendant: SIGTERM, SIGKILL after the grace for what is left; then exit."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    for signum, grace in ((signal.SIGTERM, GRACE), (signal.SIGKILL, GRACE)):
        sent: set[int] = set()
        deadline = time.monotonic() + grace
        while _signal_all(signum, sent) and time.monotonic() < deadline:
            _reap()  # (a descendant that forks meanwhile is seen on the next pass)
            time.sleep(POLL)
    _reap()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
