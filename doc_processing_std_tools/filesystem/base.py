"""What every filesystem tool shares: the jail over the roots, the locks, and how a failure becomes the user's message."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from .. import locking
from ..containment import ContainmentError, FileTooLarge, Jail, ReservedName
from ..exceptions import DptError
from ..shared.client_text import quote

if TYPE_CHECKING:
    pass
from .settings import Settings

T = TypeVar("T")

_CHUNK = 64 * 1024


_MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
    ".mp3": "audio/mpeg",
    ".wav": "audio/wav",
    ".ogg": "audio/ogg",
    ".oga": "audio/ogg",
    ".flac": "audio/flac",
    ".m4a": "audio/mp4",
    ".aac": "audio/aac",
    ".pdf": "application/pdf",
}


class FileSystemError(DptError):
    """A tool failed; the message is meant for the user (the model)."""


class EditOperation(BaseModel):
    """One replacement of ``edit_file``."""

    model_config = ConfigDict(extra="forbid")

    oldText: str = Field(description="Text to search for - must match exactly")
    newText: str = Field(description="Text to replace with")


def format_size(size: int) -> str:
    """``1.50 KB`` style sizes, like the reference server."""
    units = ["B", "KB", "MB", "GB", "TB"]
    if size < 1024:
        return f"{max(size, 0)} B"
    value = float(size)
    unit = 0
    while value >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    return f"{value:.2f} {units[unit]}"


# directory_tree shows folders this deep at most (deeper ones: call it again lower down);
# a JSON tree is nested as deep as the folders, and its reader must cope with it.
MAX_TREE_DEPTH = 100


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _timestamp(value: float) -> str:
    return datetime.fromtimestamp(value, tz=UTC).isoformat(timespec="seconds")


class RootedFileSystem:
    """The roots one call may use, and how a failure becomes the user's message; the
    tool classes below share it."""

    def __init__(self, jail: Jail, settings: Settings) -> None:
        self.jail = jail
        self.settings = settings
        # Dead writers' temp files are removed from the roots at start and wherever a
        # listing meets them, unless the server must not write at all.
        jail.sweep_temps = not settings.read_only
        if not settings.read_only:
            for root in jail.roots:
                locking.register(root)  # other launchers then take its flock too
                with suppress(OSError):
                    jail.sweep(str(root))
        umask = _umask()
        self.file_mode = 0o666 & ~umask
        self.dir_mode = 0o777

    def _fail(self, exc: BaseException, path: str) -> FileSystemError:
        """Turn an exception into a readable :class:`FileSystemError`."""
        if isinstance(exc, FileSystemError):
            return exc
        if isinstance(exc, ContainmentError | ReservedName):
            return FileSystemError(str(exc))
        if isinstance(exc, FileTooLarge):
            return FileSystemError(
                f"{exc.filename} is {exc.size} bytes, over the max_read_bytes limit of "
                f"{exc.limit}; use the head or tail parameter to read part of it"
            )
        if isinstance(exc, UnicodeError):
            return FileSystemError(f"{self.jail.display(path)} is not a UTF-8 text file")
        if isinstance(exc, ValueError):
            return FileSystemError(str(exc))
        if isinstance(exc, OSError):
            where = exc.filename
            if not (isinstance(where, str) and where.startswith("/")):
                where = self.jail.display(path)  # a bare name: show the whole path
            what = exc.strerror or os.strerror(exc.errno or 0) or type(exc).__name__
            if exc.errno == errno.ELOOP:
                what = "Too many levels of symbolic links (or a symlink where a folder was)"
            return FileSystemError(f"{what}: {quote(where)}")
        return FileSystemError(f"{type(exc).__name__}: {exc}")

    def _guard(self, path: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (OSError, ValueError, FileSystemError) as exc:
            raise self._fail(exc, path) from exc

    def _locks(self, *paths: str) -> set[Path]:
        """The marked folders (roots, memory folders) above *paths*, whose flocks a write
        there must hold so other launchers and memory-tools never interleave with it."""
        folders: set[Path] = set()
        for path in paths:
            try:
                with self.jail.resolve(path, follow_last=False) as target:
                    where = target.path
            except (ValueError, PermissionError):
                continue  # refused below with a clear message, before any change
            except OSError:  # e.g. missing parent folders, which create_directory makes
                where = Path(self.jail.display(path))
            folders.update(locking.locked_folders(where))
            folders.update(root for root in self.jail.roots if where.is_relative_to(root))
        return folders

    def _paged(
        self, lines: list[str], offset: int, what: str, tool: str, narrow: str, used: int = 0
    ) -> list[str]:
        """*lines* from *offset* on, as many as a reply holds (with *used* characters of its
        own), then a note saying how many more and how to page or narrow when some are left."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise FileSystemError(f"offset must be an integer, 0 or more, got {offset!r}")
        bounds = self.settings.reply_bounds
        rest = lines[offset:]
        shown = bounds.take(rest, used=used)
        if len(shown) == len(rest):
            return shown
        following = offset + len(shown)
        how = f"call {tool} again with offset={following} for the next ones, or {narrow}"
        return [*shown, bounds.note(len(rest) - len(shown), what, how)]

    def list_allowed_directories(self) -> str:
        return "Allowed directories:\n" + "\n".join(str(root) for root in self.jail.roots)
