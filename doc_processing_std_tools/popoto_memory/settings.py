"""popoto-memory's settings, and how they merge with popoto's ``POPOTO_MEMORY_*`` environment.

Which backend, when the settings name none: a ``url`` in the settings decides by
its scheme (``postgres…`` → postgres, else redis); otherwise
``POPOTO_BACKEND=postgres`` → postgres; otherwise ``POPOTO_MEMORY_URL`` or
``REDIS_URL`` in the environment → redis (the same store popoto's own hooks and
``popoto-memory mcp`` would use); otherwise embedded. No popoto import, no I/O here.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import platformdirs
from pydantic import Field, ValidationInfo, field_validator, model_validator

from .. import APP_NAME
from ..embedded_redis import redact
from ..settings import resolve_path
from ..shared import workspace
from ..shared.install_hint import install_extra
from ..shared.reply_bounds import DEFAULT_BOUNDS, ReplyBounds, ReplyLimits

SERVER_NAME = "popoto-memory"
ONE_PER_PROCESS = True
# memory_save/memory_feedback take locking.PROCESS_LOCK themselves, so the launcher
# must not hold it around them: the lock is not re-entrant.
LOCKS_ITSELF = True
EXTRA = "popoto"
DATA_SUBDIR = "popoto-redis"
MISSING_POPOTO = f"popoto-memory needs the optional dependency 'popoto': {install_extra('popoto')}"


def default_data_dir() -> Path:
    """The per-user store every launcher shares: ``<user data dir>/popoto-redis``.

    ``platformdirs.user_data_dir`` honours ``XDG_DATA_HOME`` (Linux), and is
    ``~/Library/Application Support`` on macOS. Projects stay apart by ``agent_id``.
    """
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / DATA_SUBDIR


Backend = Literal["embedded", "redis", "postgres"]


class Settings(ReplyLimits):
    """Settings of the ``popoto-memory`` server (all optional; the reply caps of
    :class:`ReplyLimits` bound what memory_search passes on).

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
        description="Scope of every read and write. Default: POPOTO_MEMORY_AGENT_ID, else per "
        "session the name of the client's first MCP root, else the name of the working "
        "directory when it is a project folder, else one per-user default (the name of your "
        "home folder).",
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
    agent_id: str  # the scope, or, when agent_follows_roots, the one used without client roots
    agent_source: str
    agent_follows_roots: bool = False  # no agent_id set: each session's first root names it
    data_dir: Path | None = None
    port: int | None = None
    notes: list[str] = field(default_factory=list)
    reply_bounds: ReplyBounds = DEFAULT_BOUNDS  # what memory_search passes on


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
        agent_id, agent_source = default_scope()
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
        reply_bounds=settings.reply_bounds,
        agent_id=agent_id,
        agent_source=agent_source,
        agent_follows_roots=settings.agent_id is None and agent_source not in _EXPLICIT,
        data_dir=settings.data_dir if backend == "embedded" else None,
        port=settings.port if backend == "embedded" else None,
        notes=notes,
    )


_EXPLICIT = frozenset({"settings", "environment POPOTO_MEMORY_AGENT_ID"})
FROM_ROOT = "the client's first root"
FROM_CWD = "the project working directory"
FROM_USER = "the per-user default"


def default_scope() -> tuple[str, str]:
    """(agent_id, where it came from) when no agent_id is set and the client sends no roots.

    The working directory's name when it is a project folder (the rule
    :func:`~doc_processing_std_tools.shared.workspace.unsuitable_reason` gives memory-tools), else
    one scope per user: clients started from ``/`` or ``$HOME`` would otherwise file every
    project under one name that means nothing (``default``, the home folder's name).
    """
    cwd = os.getcwd()
    name = os.path.basename(os.path.normpath(cwd))
    if name and workspace.unsuitable_reason(cwd) is None:
        return name, f"{FROM_CWD}, {cwd}"
    user = Path.home().name or "default"
    return user, f"{FROM_USER} (the working directory {cwd} is no project)"


def scope_of_root(root: Path) -> tuple[str, str] | None:
    """(agent_id, where it came from) for a client's first root: its name, as popoto names a
    project by its folder's name (so popoto's own hooks, run in that folder, share it)."""
    return (root.name, f"{FROM_ROOT}, {root}") if root.name else None


def is_local(url: str | None) -> bool:
    """Whether *url* names a server on this machine (loopback), where a call takes milliseconds."""
    if not url:
        return False
    try:
        host = urlsplit(url).hostname or ""
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
