"""The FileSystem for the call running now: fixed roots, or each session's client roots."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..containment import Jail
from ..shared import workspace

if TYPE_CHECKING:
    pass
from .base import FileSystemError
from .settings import Settings, fixed_roots, no_roots_message
from .tools import FileSystem


class SessionFileSystems:
    """The :class:`FileSystem` for the tool call running now.

    Fixed roots (setting, variable) give one instance. Otherwise each call takes the
    calling session's client roots (one jail per distinct root set, cached), else
    the project-like working directory, else refuses with :func:`no_roots_message`.
    Tool methods are looked up per call: ``systems.read_text_file(...)``.
    """

    MAX_CACHED = 32

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.source, roots, self.why = fixed_roots(settings)
        try:
            jail = Jail(roots) if roots else None
        except OSError as exc:
            raise ValueError(
                f"filesystem setting 'roots': {exc.filename} does not exist or is not a folder"
            ) from None
        self.fixed = (
            FileSystem(jail, settings) if jail and self.source != "working directory" else None
        )
        self.fallback = FileSystem(jail, settings) if jail and self.fixed is None else None
        self._by_roots: OrderedDict[tuple[Path, ...], FileSystem] = OrderedDict()
        self._lock = threading.Lock()

    def _for(self, roots: list[Path]) -> FileSystem:
        key = tuple(roots)
        with self._lock:
            found = self._by_roots.get(key)
            if found is not None:
                self._by_roots.move_to_end(key)
                return found
        try:
            fs = FileSystem(Jail(roots), self.settings)
        except OSError as exc:
            raise FileSystemError(f"The client's root {exc.filename} is not a folder") from None
        with self._lock:
            self._by_roots[key] = fs
            while len(self._by_roots) > self.MAX_CACHED:
                self._by_roots.popitem(last=False)
        return fs

    def current(self) -> FileSystem | None:
        if self.fixed is not None:
            return self.fixed
        try:
            roots = workspace.current_client_roots()
        except workspace.ClientRootsError as exc:
            raise FileSystemError(str(exc)) from None
        return self._for(roots) if roots else self.fallback

    def require(self) -> FileSystem:
        fs = self.current()
        if fs is None:
            raise FileSystemError(no_roots_message(self.why))
        return fs

    def list_allowed_directories(self) -> str:
        fs = self.current()
        if fs is None:
            return "No directory is allowed yet.\n" + no_roots_message(self.why)
        return fs.list_allowed_directories()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)

        def method(*args: Any) -> Any:
            return getattr(self.require(), name)(*args)

        return method
