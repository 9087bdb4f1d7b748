"""memory-tools' settings: where the memory folder is (setting, variable, project folder, client root, per-user folder), and the --check hooks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from ..embedded_redis import INSTALL_HINT, find_executable
from ..servers import FAIL, UNAVAILABLE
from ..settings import resolve_path
from ..shared import workspace
from ..shared.install_hint import install_extra
from ..shared.reply_bounds import ReplyLimits
from .redis_urls import namespace_problem, redact, split_store_url

if TYPE_CHECKING:
    pass


SERVER_NAME = "memory-tools"


# Every state-changing tool takes locking.exclusive() itself (process lock + flock),
# so the launcher must not hold the (non-re-entrant) process lock around them.
LOCKS_ITSELF = True


ENV_MEMORY_DIR = "DPTTOOLS_MEMORY_DIR"


DEFAULT_MEMORY_DIR = "./agent_memory"


MEMORY_FOLDER_NAME = "agent_memory"


# Where the memory folder came from (Settings.source).
FROM_SETTING = "setting"


FROM_VARIABLE = "variable"


FROM_CWD = "working directory"


FROM_USER_DATA = "client's first root, else per-user data folder"


def user_memory_dir() -> Path:
    """``<per-user data folder>/agent_memory``, used when the working directory is no project."""
    return workspace.user_data_dir() / MEMORY_FOLDER_NAME


def _default_memory_dir() -> Path:
    """$DPTTOOLS_MEMORY_DIR, else ./agent_memory when the working directory is a writable
    project folder, else the per-user folder (a client root may replace it per session)."""
    raw = os.environ.get(ENV_MEMORY_DIR)
    if raw:
        return resolve_path(raw, None)  # against the working directory, when first built
    cwd = Path(os.getcwd())
    candidate = resolve_path(DEFAULT_MEMORY_DIR, None)
    if workspace.unsuitable_reason(cwd) is None and workspace.writable_reason(candidate) is None:
        return candidate
    return user_memory_dir()


class Settings(ReplyLimits):
    """Settings of the ``memory-tools`` server (with the reply caps of :class:`ReplyLimits`)."""

    memory_dir: Path = Field(
        default_factory=_default_memory_dir,
        description=(
            f"Folder holding the memories (created on first use). Default: ${ENV_MEMORY_DIR}, "
            f"else {DEFAULT_MEMORY_DIR}; relative paths resolve against the config file's folder."
        ),
    )

    backend: Literal["folder", "redis", "embedded"] = Field(
        default="folder",
        description="Where the memories live: folder (memory_dir), redis (url: Redis or Valkey) "
        "or embedded (the private redis-server popoto-memory starts, one per user). Default: "
        "folder, or redis when url is set.",
    )
    url: str | None = Field(
        default=None,
        description="backend redis: redis://[:PASSWORD@]HOST:PORT/DB (also rediss://, valkey://, "
        "valkeys://); ${VAR} in the config keeps the password out of it.",
    )
    namespace: str = Field(
        default="default",
        description="backend redis or embedded: the store's name in that Redis; every key of it "
        "is under the hash tag {namespace}, so one namespace is one cluster slot.",
    )

    cluster: bool = Field(
        default=False,
        description="backend redis: url names one node of a Redis Cluster (or Valkey cluster); "
        "the client follows the slots (a namespace is one slot). The url's DB must be 0.",
    )

    _source: str = PrivateAttr(default=FROM_SETTING)

    def model_post_init(self, context: Any, /) -> None:
        if "memory_dir" in self.model_fields_set:
            self._source = FROM_SETTING
        elif os.environ.get(ENV_MEMORY_DIR):
            self._source = FROM_VARIABLE
        elif self.memory_dir == user_memory_dir():
            self._source = FROM_USER_DATA
        else:
            self._source = FROM_CWD

    @property
    def source(self) -> str:
        """Where memory_dir came from: setting, variable, working directory, or (when
        FROM_USER_DATA) the client's first root per session, else the per-user folder."""
        return self._source

    @property
    def follows_client_roots(self) -> bool:
        return self._source == FROM_USER_DATA and self.backend == "folder"

    @field_validator("url", mode="after")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        split_store_url(value)  # refuses other schemes
        if "?" in value:
            raise ValueError("set the namespace with the namespace setting, not in the url")
        return value

    @field_validator("namespace", mode="after")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        problem = namespace_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="before")
    @classmethod
    def _url_means_redis(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("url") is not None and "backend" not in data:
            return {**data, "backend": "redis"}
        return data

    @model_validator(mode="after")
    def _check_backend(self) -> Settings:
        if self.backend == "redis" and self.url is None:
            raise ValueError("backend redis needs a url: set 'url' (redis://HOST:PORT/DB)")
        if self.backend != "redis" and self.url is not None:
            raise ValueError(f"'url' only applies to backend: redis, not {self.backend}")
        if self.cluster and self.backend != "redis":
            raise ValueError(f"'cluster' only applies to backend: redis, not {self.backend}")
        if (
            self.cluster
            and self.url is not None
            and urlsplit(self.url).path.strip("/") not in ("", "0")
        ):
            raise ValueError("a Redis Cluster has only DB 0: end the url with /0 or no /DB")
        if self.backend == "folder" and "namespace" in self.model_fields_set:
            raise ValueError("'namespace' only applies to backend: redis or embedded")
        if self.backend != "folder" and "memory_dir" in self.model_fields_set:
            raise ValueError(f"'memory_dir' only applies to backend: folder, not {self.backend}")
        return self

    @property
    def on_redis(self) -> bool:
        return self.backend != "folder"

    @field_validator("memory_dir", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("memory_dir must not be empty")
        return value

    @field_validator("memory_dir")
    @classmethod
    def _resolve(cls, value: Path, info: ValidationInfo) -> Path:
        path = resolve_path(value, info)
        if path.exists() and not path.is_dir():
            raise ValueError(f"{path} exists and is not a folder")
        return path


def describe(settings: Settings) -> list[tuple[str, str]]:
    """(label, value) rows for ``dpt-launch --check`` (no fastmcp import, nothing created).

    Args:
        settings: Validated settings.

    Returns:
        Where the memories live (folder or Redis) and where that came from.
    """
    if settings.on_redis:
        where = redact(settings.url) if settings.url else "the embedded redis-server (per user)"
        rows = [("backend", settings.backend), ("url", where), ("namespace", settings.namespace)]
        return rows + ([("cluster", "yes (Redis Cluster client)")] if settings.cluster else [])
    path = settings.memory_dir
    state = "exists" if path.is_dir() else "created on first use"
    if settings.follows_client_roots:
        where = (
            f"<client's first root>/{MEMORY_FOLDER_NAME} when the client sends roots, "
            f"else {path} ({state})"
        )
    else:
        where = f"{path} ({state})"
    return [("memory_dir", where), ("memory from", settings.source)]


def check(settings: Settings) -> list[tuple[str, str]]:
    """(level, message) problems for ``dpt-launch --check`` and start-up (nothing created).

    On Redis, one PING: wrong credentials are a wrong setting (FAIL); an unreachable or
    missing server is this machine's lack (UNAVAILABLE: the launcher skips memory-tools,
    --check says FAIL).

    Args:
        settings: Validated settings.

    Returns:
        ``(level, message)`` pairs; empty when the memory folder or Redis is usable.
    """
    if settings.on_redis:
        return _redis_check(settings)
    why = workspace.writable_reason(settings.memory_dir)
    if why is None:
        return []
    return [("FAIL", f"memory-tools: the memory folder {why}; {_fix()}")]


def _fix() -> str:
    return f"set ${ENV_MEMORY_DIR} or the memory_dir setting to a writable folder"


MISSING_REDIS = (
    "memory-tools: backend redis and embedded need the optional dependency 'redis': "
    f"{install_extra('redis')}"
)


def _redis_check(settings: Settings) -> list[tuple[str, str]]:
    try:
        # (whether the redis extra is installed; 0.11 s, only for a Redis backend)
        import redis  # noqa: F401
    except ImportError:
        return [(UNAVAILABLE, MISSING_REDIS)]

    if settings.backend == "embedded":
        if find_executable() is None:
            return [
                (
                    UNAVAILABLE,
                    f"memory-tools: backend embedded needs a redis-server: {INSTALL_HINT}, "
                    "or set 'backend: redis' and 'url'",
                )
            ]
        return []
    # (here, not at the top: it imports redis, the redis extra, optional, 0.11 s)
    from .redis_connection import RedisMemory

    problem = RedisMemory(settings.url, settings.namespace, cluster=settings.cluster).ping()
    if problem is None:
        return []
    level = FAIL if "refused the credentials" in problem else UNAVAILABLE
    return [(level, f"memory-tools: {problem}")]
