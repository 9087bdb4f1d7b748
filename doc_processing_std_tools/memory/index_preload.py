"""A provider of memory-tools whose lifespan starts reading the store's index in the background,
so the first search_memory need not wait for it: served, not merely built (``dpt-launch tools``,
``--check``). A provider's lifespan, not the server's: the launcher grafts a mounted server's
providers onto its root and runs their lifespans, as fastmcp runs them when served alone."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastmcp.server.providers import Provider

from .stores import MemoryStore


class IndexPreload(Provider):
    """Starts the store's index warm-up once, when the server's lifespan begins."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__()
        self.store = store
        self.thread: threading.Thread | None = None  # the warm-up, once started

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        if self.thread is None:
            self.thread = threading.Thread(
                target=self.store.warm_index, name="dpt-memory-index", daemon=True
            )
            self.thread.start()
        yield
