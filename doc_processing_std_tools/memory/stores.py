"""The store for the call running now: one per memory folder, chosen per session when the folder follows the client's roots."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..embedded_redis import EmbeddedRedis
from ..popoto_memory.settings import default_data_dir
from ..shared import workspace

if TYPE_CHECKING:
    from .redis_store import RedisMemoryStore
from .files import FileCommands
from .formats import MemoryStoreError
from .keys import KeyValueStore
from .settings import MEMORY_FOLDER_NAME, Settings, _fix


class MemoryStore(KeyValueStore, FileCommands):
    """The memory tools' logic, without MCP: methods return the result text and
    raise :class:`MemoryStoreError` with the message for the user."""


def open_store(settings: Settings) -> MemoryStore | RedisMemoryStore:
    """The store the settings name: a :class:`MemoryStore` on the folder, or a
    :class:`~.redis_store.RedisMemoryStore` on the Redis namespace (nothing connects yet)."""
    bounds = settings.reply_bounds
    if not settings.on_redis:
        return MemoryStore(settings.memory_dir, bounds)
    # (here, not at the top: it imports redis, the redis extra, optional, 0.11 s)
    from .redis_connection import RedisMemory
    from .redis_store import RedisMemoryStore

    if settings.backend == "embedded":
        db = RedisMemory(None, settings.namespace, connect_url=_embedded_url)
    else:
        db = RedisMemory(settings.url, settings.namespace, cluster=settings.cluster)
    return RedisMemoryStore(db, bounds)


_EMBEDDED: Any = None
_EMBEDDED_LOCK = threading.Lock()


def _embedded_url() -> str:
    """The url of the per-user redis-server popoto-memory shares, started (or restarted) here."""
    global _EMBEDDED
    with _EMBEDDED_LOCK:
        if _EMBEDDED is None:
            _EMBEDDED = EmbeddedRedis(default_data_dir())
        _EMBEDDED.ensure_running()
        return str(_EMBEDDED.url())


class SessionStores:
    """The :class:`MemoryStore` for the tool call running now.

    A memory folder from the setting, the variable or the working directory is used
    for every call. Otherwise each session uses ``<its client's first root>/agent_memory``
    when the client sends roots, else the per-user folder. Store methods are looked
    up per call: ``stores.write(...)``.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.default = open_store(settings)
        self._stores: dict[Path, MemoryStore] = {}
        self._lock = threading.Lock()

    def current(self) -> MemoryStore | RedisMemoryStore:
        if not self.settings.follows_client_roots:
            return self.default
        try:
            roots = workspace.current_client_roots()
        except workspace.ClientRootsError as exc:
            raise MemoryStoreError(str(exc)) from None
        if not roots:
            return self.default
        folder = roots[0] / MEMORY_FOLDER_NAME
        why = workspace.writable_reason(folder)
        if why is not None:
            raise MemoryStoreError(
                f"The memory folder (agent_memory in the client's first root) {why}; {_fix()}"
            )
        with self._lock:
            store = self._stores.get(folder)
            if store is None:
                store = self._stores[folder] = MemoryStore(folder, self.settings.reply_bounds)
        return store

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def method(*args: Any) -> Any:
            return getattr(self.current(), name)(*args)

        return method
