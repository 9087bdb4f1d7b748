"""A composition as its middlewares read it (``mounts``, and their owners), for tests that
hand a middleware stand-in mounts."""

from __future__ import annotations

from types import SimpleNamespace

from doc_processing_std_tools.launcher.compose.owners import Owners, OwnersCache


class Composed(SimpleNamespace):
    """Any attributes given (``mounts``, ``root``, ``guards``...), and :meth:`owners` cached per
    mounts list as :class:`~doc_processing_std_tools.launcher.compose.composition.Composition`
    caches it."""

    def owners(self) -> Owners:
        cache = self.__dict__.setdefault("owners_cache", OwnersCache())
        return cache.of(self.mounts)
