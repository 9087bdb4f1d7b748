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

import _ctypes
import _signal
import posix
import sys
import time

# The shim imports the C modules under os, signal and ctypes, not those: they cost 1.2 MB of
# each shim's 3.8 MB (USS, /proc/PID/smaps_rollup; typing and pathlib would add 1.5 MB more).
# mypy treats MYPY as TYPE_CHECKING.
MYPY = False
if MYPY:
    from typing import NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
GRACE = 1.5  # seconds descendants have after SIGTERM before SIGKILL (below the SDK's 2 s)
POLL = 0.05  # seconds between looks at what is left
ENDING = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)


class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]  # ctypes.c_int
    _type_ = "i"


class _CFunction(_ctypes.CFuncPtr):  # a C function of libc, as ctypes.CDLL builds them
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _Libc:
    """What _CFunction asks of a library: ``ctypes.CDLL(None)``'s handle (the program's own
    symbols, libc's among them)."""

    def __init__(self) -> None:
        self._handle = _ctypes.dlopen(None)  # type: ignore[arg-type]  # None: as CDLL(None)


def wrapped_command(command: str, args: list[str]) -> tuple[str, list[str]]:
    """The command and arguments that run *command* through this shim (Linux only)."""
    if not sys.platform.startswith("linux"):
        return command, args
    here = __file__ if __file__.startswith("/") else f"{posix.getcwd()}/{__file__}"
    return sys.executable, ["-I", "-S", here, str(posix.getpid()), command, *args]


def main(argv: list[str]) -> None:
    parent, command, *args = argv
    prctl = _CFunction(("prctl", _Libc()))  # type: ignore[arg-type]  # has a CDLL's _handle
    prctl(PR_SET_PDEATHSIG, _signal.SIGTERM)
    if posix.getppid() != int(parent):  # the launcher died before the request took effect
        sys.exit(1)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    pid = posix.fork()
    if pid == 0:
        prctl(PR_SET_PDEATHSIG, _signal.SIGTERM)  # (not inherited: if the shim is killed)
        _exec(command, args)
    devnull = posix.open("/dev/null", posix.O_RDWR)
    posix.dup2(devnull, 0)
    posix.dup2(devnull, 1)
    for signum in ENDING:
        _signal.signal(signum, lambda *_: _end_all(1))
    _, status = posix.waitpid(pid, 0)
    _end_all(posix.waitstatus_to_exitcode(status) if posix.WIFEXITED(status) else 1)


def _exec(command: str, args: list[str]) -> NoReturn:
    """``os.execvp``: *command* as given when it names a path, else the first on ``PATH`` that
    runs."""
    argv = [command, *args]
    if "/" in command:
        places = [command]
    else:
        path = posix.environ.get(b"PATH", b"/bin:/usr/bin").decode(errors="surrogateescape")
        places = [f"{folder or '.'}/{command}" for folder in path.split(":")]
    first_other: OSError | None = None  # (os tells the first error other than "not found")
    last: OSError | None = None
    for place in places:
        try:
            posix.execv(place, argv)
        except OSError as exc:
            last = exc
            if first_other is None and not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
                first_other = exc
    told = first_other or last
    reason = told.strerror if told is not None else "not found"
    print(f"cannot run {command!r}: {reason}", file=sys.stderr, flush=True)
    posix._exit(127)


def _descendants() -> list[int]:
    """Live processes whose parent chain leads to the shim (orphans were re-parented to it)."""
    children: dict[int, list[int]] = {}
    for entry in posix.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                fields = file.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [posix.getpid()]
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
            try:  # noqa: SIM105  (contextlib is not imported: see above)
                posix.kill(pid, signum)
            except OSError:
                pass  # (gone meanwhile)
    return bool(pids)


def _reap() -> None:
    """Collect exited children (the command's, and orphans re-parented to the shim)."""
    try:
        while posix.waitpid(-1, posix.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _end_all(code: int) -> NoReturn:
    """End every descendant: SIGTERM, SIGKILL after the grace for what is left; then exit."""
    for signum in ENDING:
        _signal.signal(signum, _signal.SIG_IGN)
    for signum, grace in ((_signal.SIGTERM, GRACE), (_signal.SIGKILL, GRACE)):
        sent: set[int] = set()
        deadline = time.monotonic() + grace
        while _signal_all(signum, sent) and time.monotonic() < deadline:
            _reap()  # (a descendant that forks meanwhile is seen on the next pass)
            time.sleep(POLL)
    _reap()
    posix._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
