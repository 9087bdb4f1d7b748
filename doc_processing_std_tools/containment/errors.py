"""The refusals a confined path operation raises: outside the roots, a reserved name, a
root folder changed, a file over the read limit."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path

from ..exceptions import DptError
from ..shared.client_text import quote
from .conventions import RESERVED_PREFIX


class ContainmentError(DptError, PermissionError):
    """A path that leads, or would lead, outside every root."""

    def __init__(self, path: str, roots: Sequence[Path], *, via_symlink: bool = False) -> None:
        self.path = path
        self.roots = tuple(roots)
        self.via_symlink = via_symlink
        kind = "symlink target" if via_symlink else "path"
        allowed = ", ".join(str(r) for r in self.roots)
        super().__init__(
            errno.EACCES,
            f"Access denied - {kind} outside allowed directories: {quote(path)} not in {allowed}",
        )

    def __str__(self) -> str:
        return str(self.strerror)


class ReservedName(DptError, PermissionError):
    """A path (or a symlink on it) naming a ``.dpt*`` file: the servers' locks and temp files."""

    def __init__(self, path: str, part: str) -> None:
        self.path = path
        super().__init__(
            errno.EPERM,
            f"Access denied - {quote(path, 200)} uses the reserved name {quote(part, 80)!r}: "
            f"names starting with {RESERVED_PREFIX!r} are the servers' lock and temp files",
        )

    def __str__(self) -> str:
        return str(self.strerror)


class RootChangeRefused(DptError, PermissionError):
    """Deleting or moving a root folder, or a folder that holds one, is never allowed."""

    def __init__(self, action: str, path: Path) -> None:
        super().__init__(
            errno.EPERM, f"Refusing to {action} a root folder (or one holding a root)", str(path)
        )


class FileTooLarge(DptError, OSError):
    """A file over the configured read limit."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(errno.EFBIG, f"File is {size} bytes, over the {limit}-byte limit", path)
