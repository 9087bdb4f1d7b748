"""One embedded store's folder: its files, locks and state, and the supervisor process.

Standard library only: this file also runs as a script (``python -I -S folder.py
supervise DATA_DIR EXECUTABLE``), the small process that runs the redis-server as
its child and stops it once no launcher holds a lease (see the package docstring).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    from ..exceptions import DptError
except ImportError:  # run as a script (no package): its errors reach no caller of the package

    class DptError(Exception):  # type: ignore[no-redef]
        """Stands in for the package's root when this file runs as a script."""


DB_INDEX = 1  # popoto refuses database 0
PASSWORD_FILE = "password"
CONFIG_FILE = "redis.conf"
PID_FILE = "redis.pid"
LOG_FILE = "redis.log"
LEASE_LOCK_FILE = ".lease.lock"
START_LOCK_FILE = ".start.lock"
LOCK_TIMEOUT = 30.0  # seconds to wait for another process's start or stop
SUPERVISOR_POLL = 0.2  # seconds between the supervisor's checks of the lease
SERVER_NAMES = ("redis-server", "valkey-server")


class EmbeddedRedisError(DptError, RuntimeError):
    """The embedded redis-server could not be started or reached; the message says why."""


def pid_alive(pid: int) -> bool:
    """Whether *pid* runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    except OSError:
        pass
    try:  # no /proc (macOS)
        out = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return out.split()


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child before exec
    """preexec_fn: ask Linux to SIGTERM the redis-server when the supervisor dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # no libc to load, or one without prctl
        pass


def open_lock(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)


def flock(fd: int, op: int, timeout: float, what: str) -> None:
    """``flock(fd, op)``, waiting at most *timeout* seconds (polling, so it can give up)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise EmbeddedRedisError(
                    f"gave up after {timeout:g} s waiting for {what}; another process is "
                    "starting or stopping this store's redis-server and has not finished"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def try_flock(fd: int, op: int) -> bool:
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def terminate(pid: int, still_running: Callable[[], bool], timeout: float) -> None:
    """SIGTERM *pid* (redis flushes its AOF), wait while *still_running()*, then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    delay = 0.005
    while time.monotonic() < deadline:
        if not still_running():
            return
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


class StoreFolder:
    """The files of one store (``data_dir``) and what is done to them under its start lock."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        # one spelling per folder: the running server is recognized by its config path
        self.data_dir = Path(os.path.realpath(data_dir))

    @property
    def password_path(self) -> Path:
        return self.data_dir / PASSWORD_FILE

    @property
    def config_path(self) -> Path:
        return self.data_dir / CONFIG_FILE

    @property
    def pid_path(self) -> Path:
        return self.data_dir / PID_FILE

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    def read_state(self) -> dict[str, int]:
        """``redis.pid``: the running server's ``pid``, ``port`` and ``supervisor``."""
        try:
            data = json.loads(self.pid_path.read_text())
            return {k: int(v) for k, v in data.items() if k in ("pid", "port", "supervisor")}
        except (OSError, ValueError, TypeError, AttributeError):
            return {}

    def write_state(self, state: dict[str, int]) -> None:
        tmp = self.pid_path.with_name(PID_FILE + ".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.pid_path)

    def clear_state(self, pid: int | None) -> None:
        if pid is None or self.read_state().get("pid") == pid:
            with contextlib.suppress(FileNotFoundError):
                self.pid_path.unlink()

    def is_ours(self, pid: int) -> bool:
        """Whether *pid* is a live redis/valkey server started on this folder's config."""
        if not pid_alive(pid):
            return False
        argv = _cmdline(pid)
        if not argv:
            return False
        exe = os.path.basename(argv[0])
        return any(name in exe for name in SERVER_NAMES) and str(self.config_path) in argv

    @contextlib.contextmanager
    def start_lock(self, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
        """The exclusive ``flock`` under which servers are started, attached to and stopped."""
        fd = open_lock(self.data_dir / START_LOCK_FILE)
        try:
            flock(fd, fcntl.LOCK_EX, timeout, f"the start lock of {self.data_dir}")
            yield
        finally:
            os.close(fd)

    def stop_if_unused(self) -> bool:
        """Under the start lock: stop the server if no lease is held. True if stopped/gone."""
        probe = open_lock(self.data_dir / LEASE_LOCK_FILE)
        try:
            if not try_flock(probe, fcntl.LOCK_EX):
                return False  # another user still holds a lease
            pid = self.read_state().get("pid")
            if pid is not None and self.is_ours(pid):
                terminate(pid, lambda: self.is_ours(pid), timeout=10.0)
            self.clear_state(pid)
            return True
        finally:
            os.close(probe)

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"


# -- the supervisor process ------------------------------------------------------------


def supervise(data_dir: str, executable: str) -> int:
    """Run the redis-server as our child; stop it once no lease is held. Returns an exit code.

    Forks away from the starter, prints "<server pid> <own pid>" on stdout (the
    starter reads it), then polls the lease.
    """
    if os.fork() > 0:  # detach: the starter reaps this parent at once, init adopts us
        os._exit(0)
    store = StoreFolder(data_dir)
    proc = subprocess.Popen(
        [executable, str(store.config_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=sys.stderr,  # the log file
        close_fds=True,
        preexec_fn=_set_pdeathsig,
    )
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        sys.stdout.write(f"{proc.pid} {os.getpid()}\n")
        sys.stdout.flush()
    except OSError:
        pass
    with contextlib.suppress(OSError):  # the starter closes its end; never write there again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)

    lease = open_lock(store.data_dir / LEASE_LOCK_FILE)
    while not stopping:
        if proc.poll() is not None:
            print(f"supervisor: redis-server exited with status {proc.returncode}", file=sys.stderr)
            return 0
        time.sleep(SUPERVISOR_POLL)
        # cheap check without the start lock; confirmed under it by _stop_if_unused
        if not try_flock(lease, fcntl.LOCK_EX):
            continue
        fcntl.flock(lease, fcntl.LOCK_UN)
        try:
            with store.start_lock(timeout=5.0):
                if proc.poll() is not None or store.stop_if_unused():
                    break
        except EmbeddedRedisError:
            continue  # a slow start or stop elsewhere; look again later
    if proc.poll() is None:  # SIGTERM to us: stop the server too
        terminate(proc.pid, lambda: proc.poll() is None, timeout=10.0)
    proc.wait()
    with contextlib.suppress(OSError, EmbeddedRedisError), store.start_lock(timeout=5.0):
        store.clear_state(proc.pid)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "supervise":
        sys.exit(supervise(sys.argv[2], sys.argv[3]))
    print(
        "usage: python folder.py supervise DATA_DIR EXECUTABLE",
        file=sys.stderr,
    )
    sys.exit(2)
