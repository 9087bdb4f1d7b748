"""The backend behind one popoto-memory server: started in the background, at most one per process.

popoto keeps one global Redis connection per process, so only one runtime may be
active in a process (a second lifespan is refused with :class:`PopotoUnavailable`).
Starting (popoto's import, the embedded redis-server) runs in a thread so that
serving never waits for it; the first call does (:meth:`Runtime.wait_ready`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

import anyio

from ..embedded_redis import EmbeddedRedis, EmbeddedRedisError, redact
from ..servers import ServerLoadError
from .settings import MISSING_POPOTO, Resolved, is_local

log = logging.getLogger(__name__)

# The first call waits this long for the background start (popoto's import, the
# embedded server, which may wait for another launcher's start: LOCK_TIMEOUT).
START_TIMEOUT = 60.0
IMPORT_DELAY = 0.6  # seconds the background start waits unless a call needs it (see _prepare)


class PopotoUnavailable(ServerLoadError):
    """popoto-memory cannot serve: a second one in this process, or its backend did not start."""


def import_popoto() -> None:
    """Import what calls use (about 0.3 s: popoto, redis), so that no call pays for it."""
    # (popoto: the popoto extra, optional, and 0.55 s to import: never on the package's import)
    import popoto.integrations.config
    import popoto.integrations.mcp_server
    import popoto.integrations.service  # noqa: F401


# popoto warns on every search that shares no word with any memory ("collected no query
# signal ... see the recipe reindex caveat"): an ordinary empty result, which memory_search
# answers by itself, logged in every client's server log with advice about popoto's internals.
NO_HIT_LOGGER = "POPOTO.ContextAssembler"
NO_HIT_MESSAGE = "%s retrieval for %s collected no query signal"


class NoHitIsNoWarning(logging.Filter):
    """popoto's no-hit warning, shown only when its logger is set to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith(NO_HIT_MESSAGE):
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


_NO_HIT_FILTER = NoHitIsNoWarning()
logging.getLogger(NO_HIT_LOGGER).addFilter(_NO_HIT_FILTER)


_ACTIVE: Runtime | None = None


@dataclass(frozen=True, slots=True)
class Scope:
    """The agent_id a call reads and writes under, and where it came from (said to the user)."""

    agent_id: str
    source: str


class Runtime:
    """State shared by one server's tools: the resolved config and the embedded server."""

    def __init__(self, resolved: Resolved) -> None:
        self.resolved = resolved
        self.embedded: EmbeddedRedis | None = None
        if resolved.backend == "embedded":
            assert resolved.data_dir is not None
            self.embedded = EmbeddedRedis(resolved.data_dir, port=resolved.port)
        # a store on this machine answers in milliseconds: calls may run on the event loop
        self.local = self.embedded is not None or (
            resolved.backend == "redis" and is_local(resolved.url)
        )
        self.config: Any = None  # popoto MemoryConfig, set by the background start
        self.default_scope = Scope(resolved.agent_id, resolved.agent_source)
        self._scoped: dict[str, Any] = {}  # agent_id -> self.config with that agent_id
        self.told: set[str] = set()  # scopes whose source an empty search has named
        self.start_error: PopotoUnavailable | None = None
        self.started = False
        self._ready = threading.Event()
        self._needed = threading.Event()  # set when a call waits for the start
        self._starter: threading.Thread | None = None
        self._recover_lock = threading.Lock()

    @property
    def ready(self) -> bool:
        """Started, and the background start has finished (or failed)."""
        return self.started and self._ready.is_set()

    # -- lifecycle (called from the server's lifespan) --------------------------

    async def start(self) -> None:
        """Claim the process's popoto connection, then start in the background.

        Serving does not wait: popoto's import and the embedded redis-server's start
        run in a thread (the server in its own process meanwhile), and the first call
        waits for them (:meth:`wait_ready`).
        """
        global _ACTIVE
        if _ACTIVE is not None and _ACTIVE is not self:
            raise PopotoUnavailable(
                "another popoto-memory server is already running in this process; popoto "
                "keeps one global connection, so run at most one popoto-memory per process"
            )
        _ACTIVE = self
        self.start_error = None
        self.config = None
        self._ready.clear()
        self.started = True
        self._starter = threading.Thread(
            target=self._prepare, name="popoto-memory start", daemon=True
        )
        self._starter.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the background start has finished (or failed); False on timeout."""
        self._needed.set()  # a call waits: import popoto now, not after IMPORT_DELAY
        return self._ready.wait(START_TIMEOUT if timeout is None else timeout)

    def _prepare(self) -> None:
        """Background start: the redis-server (its own thread: mostly waiting) and popoto's import."""
        # popoto's import holds the GIL for most of a second, and the redis-server start
        # spawns processes: leave the launcher that moment to answer its client's first
        # tools/list (on two cores it matters), unless a call needs popoto first
        self._needed.wait(IMPORT_DELAY)
        embedded_error: list[PopotoUnavailable] = []
        starter = None
        if self.embedded is not None:
            starter = threading.Thread(
                target=self._start_embedded, args=(embedded_error,), name="popoto-memory redis"
            )
            starter.start()
        try:
            import_popoto()
            if starter is not None:
                starter.join()
            if embedded_error:
                self.start_error = embedded_error[0]
            else:
                self._configure()
        except ImportError as exc:
            self.start_error = PopotoUnavailable(
                f"popoto cannot be imported ({exc}); {MISSING_POPOTO}"
            )
            log.error("popoto-memory: %s", self.start_error)
        except Exception as exc:
            self.start_error = PopotoUnavailable(f"it could not start: {type(exc).__name__}: {exc}")
            log.error("popoto-memory: %s", self.start_error)
        finally:
            if starter is not None:
                starter.join()
            self._ready.set()

    def _start_embedded(self, error: list[PopotoUnavailable]) -> None:
        emb = self.embedded
        assert emb is not None
        try:
            # attach to the folder's running redis-server, or start it (it may wait for
            # another launcher's start or stop)
            emb.ensure_running()
        except (EmbeddedRedisError, OSError) as exc:
            error.append(PopotoUnavailable(f"its redis-server did not start: {exc}"))
            log.error("popoto-memory: the embedded %s", error[0])
        else:
            how = "started" if emb.started_here else "attached to"
            log.info("popoto-memory: %s %s", how, self.backend_label())

    def _configure(self) -> None:
        """Build popoto's MemoryConfig and point popoto's global connection at it."""
        # (popoto: optional, 0.55 s; imported by then, see import_popoto)
        from popoto.integrations.config import MemoryConfig

        r = self.resolved
        env = dict(r.env)
        if self.embedded is not None:
            env["POPOTO_MEMORY_URL"] = self.embedded.url()
        config = MemoryConfig.from_env(env=env)
        if r.backend != "postgres":
            # always an explicit URL: popoto then (re)binds its one connection to it,
            # with its 1 s timeout and no retries
            source = "embedded redis-server" if self.embedded is not None else r.url_source
            if source == "settings":
                source = "POPOTO_MEMORY_URL"  # wording of popoto's DB-0 refusal
            config = dataclasses.replace(config, url_is_explicit=True, url_source=source)
        self._scoped = {}
        self.config = dataclasses.replace(config, agent_id=r.agent_id)
        self._select_backend()
        try:
            self.new_service()
        except Exception as exc:  # DB 0 refused, no db number: reported by each call too
            log.warning("popoto-memory: %s: %s", type(exc).__name__, exc)

    def _select_backend(self) -> None:
        # (popoto: optional, 0.55 s; imported by then, see import_popoto)
        from popoto.backends import set_backend

        r = self.resolved
        if r.backend == "postgres":
            # popoto's Postgres backend reads its DSN from the process environment only
            if r.url is not None:
                os.environ["POPOTO_POSTGRES_URL"] = r.url
            set_backend("postgres")
        else:
            set_backend("redis")

    async def stop(self) -> None:
        global _ACTIVE
        try:
            with anyio.CancelScope(shield=True):
                starter = self._starter
                if starter is not None:
                    await anyio.to_thread.run_sync(starter.join)
                if self.embedded is not None:
                    # drop our lease; the last user out stops the server
                    await anyio.to_thread.run_sync(self.embedded.release)
        finally:
            self.started = False
            self._starter = None
            if _ACTIVE is self:
                _ACTIVE = None

    def recover(self) -> None:
        """Embedded only, worker thread: bring the shared server back if it is gone.

        Another launcher, or its supervisor, may have been killed. Returns when the
        store answers again (popoto rebound to it); raises :class:`PopotoUnavailable`.
        """
        emb = self.embedded
        if emb is None or not emb.acquired:
            raise PopotoUnavailable("the embedded redis-server is not in use by this launcher")
        with self._recover_lock:
            try:
                if emb.ensure_running():
                    self._configure()  # a new port: rebind popoto's connection
            except (EmbeddedRedisError, OSError) as exc:
                raise PopotoUnavailable(
                    f"its redis-server is gone and could not be started again: {exc}"
                ) from None

    # -- what calls use ---------------------------------------------------------

    def new_service(self, scope: Scope | None = None) -> Any:
        """A popoto MemoryService for one call, in *scope* (default: :attr:`default_scope`).

        One per call, as popoto's own server does (~0.03 ms): a MemoryService that once saw
        the backend down skips every later operation. Scopes share the one connection: only
        the agent_id differs.
        """
        # (popoto: optional, 0.55 s; imported by then, see import_popoto)
        from popoto.integrations.service import MemoryService

        config = self.config
        if scope is not None and scope.agent_id != config.agent_id:
            scoped = self._scoped.get(scope.agent_id)
            if scoped is None or scoped.url != config.url:
                scoped = self._scoped[scope.agent_id] = dataclasses.replace(
                    config, agent_id=scope.agent_id
                )
            config = scoped
        return MemoryService(config)

    def backend_label(self) -> str:
        """One line naming the store, with its URL redacted."""
        r = self.resolved
        if self.embedded is not None:
            return (
                f"embedded redis-server at {self.display_url()} (data in {self.embedded.data_dir})"
            )
        return f"{r.backend} at {self.display_url()} (url from {r.url_source})"

    def display_url(self) -> str:
        if self.embedded is not None:
            return self.embedded.url(redacted=True) if self.embedded.port else "(not started)"
        return redact(self.resolved.url) if self.resolved.url else "(unset)"

    def fix(self) -> str:
        """How to repair an unavailable backend, per backend."""
        r = self.resolved
        if self.embedded is not None:
            return (
                f"Its log is {self.embedded.log_path}. Or set 'backend: redis' and 'url' in "
                "the popoto-memory settings to use your own Redis or Valkey."
            )
        if r.backend == "redis":
            return (
                "Start Redis or Valkey there, or set 'url' in the popoto-memory settings "
                "(or POPOTO_MEMORY_URL) to a reachable server, or use 'backend: embedded' to "
                "let the launcher run a private redis-server."
            )
        return (
            "Check 'url' (POPOTO_POSTGRES_URL) and that the server is PostgreSQL 18 or newer; "
            "the driver comes with: pip install 'popoto[postgres]'."
        )

    def unavailable(self, cause: BaseException) -> str:
        """The error text for an unreachable backend: what failed and how to fix it.

        *cause*: a :class:`PopotoUnavailable` (its message says what happened) or the
        error a ping of the backend raised.
        """
        r = self.resolved
        if self.embedded is not None:
            detail = (
                str(cause)
                if isinstance(cause, PopotoUnavailable)
                else f"its redis-server at {self.display_url()} does not answer ({cause})"
            )
            what = f"popoto-memory is unavailable (backend: embedded): {detail}."
        elif r.backend == "redis":
            what = (
                f"popoto-memory is unavailable (backend: redis): cannot reach "
                f"{self.display_url()} ({cause})."
            )
        else:
            what = (
                f"popoto-memory is unavailable (backend: postgres, {self.display_url()}): {cause}."
            )
        return f"{what} {self.fix()}"
