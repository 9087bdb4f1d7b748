"""One memory folder: its jail, its locks, and the edit loop that keeps slow reading and searching outside them."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import TypeVar

from .. import locking
from ..containment import ContainmentError, Jail
from ..shared.client_text import quote
from ..shared.reply_bounds import DEFAULT_BOUNDS, ReplyBounds
from .formats import MemoryStoreError, _decode_text, _encode_text, checked_path
from .index import EntryIndex

R = TypeVar("R")


SWEEP_DELAY = 3.0  # seconds from the first call to the sweep of dead writers' temp files


EDIT_ATTEMPTS = 3  # optimistic edits before one runs wholly under the locks
# CPU seconds: an edit computed faster than this (about a small file's fsync'd write) is redone
# under the locks when its file changed before it got them, instead of starting over.
CHEAP_EDIT_SECONDS = 0.002


class MemoryFolder:
    """One memory folder: where it is, its jail, its locks, and the edit loop that
    keeps slow work outside them. :class:`KeyValueStore` and :class:`FileCommands` work on it."""

    def __init__(
        self, memory_dir: str | os.PathLike[str], bounds: ReplyBounds = DEFAULT_BOUNDS
    ) -> None:
        self.memory_dir = Path(memory_dir)
        self.bounds = (
            bounds  # the caps of search_memory's, list_memory_keys' and a folder view's reply
        )
        self._swept = False  # stale temp files are removed on first use
        self.index = EntryIndex(self.memory_dir)

    def _jail(self) -> Jail:
        """A jail on the memory directory, creating the directory if it is missing."""
        try:
            if not os.path.isdir(self.memory_dir):
                os.makedirs(self.memory_dir, mode=0o700, exist_ok=True)
                _ignore_itself(self.memory_dir)
            jail = Jail([self.memory_dir])
        except (FileExistsError, NotADirectoryError):
            raise MemoryStoreError(
                f"The memory directory {self.memory_dir} is not a folder"
            ) from None
        except OSError as exc:
            raise MemoryStoreError(
                f"Cannot use the memory directory {self.memory_dir}: {exc.strerror or exc}"
            ) from None
        if not self._swept:
            self._swept = True
            # A crash's litter, removed a moment after the first call rather than before it
            # (listings hide it meanwhile, and remove what they meet).
            sweep = threading.Timer(SWEEP_DELAY, self._sweep, args=(jail,))
            sweep.daemon = True
            sweep.start()
        return jail

    @staticmethod
    def _sweep(jail: Jail) -> None:
        with suppress(OSError):
            jail.sweep(str(jail.roots[0]), recursive=True)

    @contextmanager
    def _locked(self) -> Iterator[Jail]:
        """Hold the process lock and the store's file lock for a check-and-change."""
        jail = self._jail()
        with ExitStack() as stack:
            try:
                stack.enter_context(locking.exclusive(folders=[jail.roots[0]], marked=True))
            except OSError as exc:
                raise MemoryStoreError(f"Cannot lock the memory directory: {exc}") from None
            yield jail

    def _own_paths(self) -> list[list[str]]:
        """The memory directory's absolute path as components, as given and resolved."""
        given = os.path.abspath(self.memory_dir)
        spellings = [given, os.path.realpath(given)]
        return [[p for p in spelling.split("/") if p] for spelling in dict.fromkeys(spellings)]

    @staticmethod
    def _abs(jail: Jail, parts: list[str]) -> str:
        """The jail path of *parts* below the root (absolute, so ``~`` is never expanded)."""
        return "/".join([str(jail.roots[0]), *parts]) if parts else str(jail.roots[0])

    def _parse_path(self, path: str) -> tuple[list[str], str]:
        """(components, display form) of a memory path; refuses NUL and reserved names.

        The memory directory's own absolute path, written at the start, names the
        directory itself, so ``<memory_dir>/../x`` is refused as an escape instead
        of being created as ``<memory_dir>/<memory_dir path>/x``.
        """
        if not isinstance(path, str):
            raise MemoryStoreError(f"The path must be a string, got {type(path).__name__}")
        if "\x00" in path:
            raise MemoryStoreError(
                f"Invalid path {quote(repr(path))}: paths cannot contain NUL bytes"
            )
        parts = [part for part in path.split("/") if part not in ("", ".")]
        if path.startswith("/"):
            for own in self._own_paths():
                if parts[: len(own)] == own:
                    parts = parts[len(own) :]
                    break
        display = checked_path(path, parts)
        return parts, display

    @contextmanager
    def _guard(
        self, display: str, action: str = "access", missing: str | None = None
    ) -> Iterator[None]:
        """Turn OS and containment errors into user-facing messages (*missing*: for ENOENT)."""
        try:
            yield
        except MemoryStoreError:
            raise
        except ContainmentError as exc:
            suffix = " via symlink" if exc.via_symlink else ""
            raise MemoryStoreError(
                f"Path {display} would escape the memory directory{suffix}"
            ) from None
        except FileNotFoundError:
            raise MemoryStoreError(
                missing or f"The path {display} does not exist. Please provide a valid path."
            ) from None
        except NotADirectoryError:
            raise MemoryStoreError(
                f"The path {display} is not valid: one of its parent folders is a file"
            ) from None
        except IsADirectoryError:
            raise MemoryStoreError(f"The path {display} is a directory, not a file") from None
        except UnicodeError:
            raise MemoryStoreError(
                f"Cannot {action} {display}: the text is not valid Unicode"
            ) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise MemoryStoreError(
                    f"The path {display} has too many levels of symbolic links"
                ) from None
            raise MemoryStoreError(f"Cannot {action} {display}: {exc.strerror or exc}") from None
        except ValueError as exc:  # e.g. a name the OS cannot encode
            raise MemoryStoreError(f"Cannot {action} {display}: {exc}") from None

    def _file_bytes(self, jail: Jail, parts: list[str], display: str) -> bytes:
        """The bytes of the regular file at *parts* (refusing folders and other types)."""
        target = self._abs(jail, parts)
        with self._guard(display, "edit"):
            info = jail.lstat(target)
            if not stat.S_ISREG(info.st_mode):
                raise MemoryStoreError(f"The path {display} is not a file.")
            return jail.read_bytes(target)

    def _edit(self, parts: list[str], display: str, change: Callable[[str], tuple[str, R]]) -> R:
        """Apply *change* (old text -> (new text, result)) to a file, holding the locks only to write.

        The read, the search and the new content are computed before the locks are taken
        (so a slow or refused edit never makes other writers wait); under the locks the
        file is read again and written if its bytes are still those *change* saw. If another
        writer changed them meanwhile, an edit that took under :data:`CHEAP_EDIT_SECONDS` of
        CPU is redone at once under the locks it holds: starting over would make every writer
        of a busy file read and compute again, and come back to find it changed once more.
        A costlier edit starts over outside the locks; its last attempt runs wholly under them.
        """
        for _attempt in range(EDIT_ATTEMPTS - 1):
            before = self._file_bytes(self._jail(), parts, display)
            spent = time.thread_time()
            data, result = _apply(change, before, display)
            cheap = time.thread_time() - spent < CHEAP_EDIT_SECONDS
            with self._locked() as jail:
                current = self._file_bytes(jail, parts, display)
                if current != before:
                    if not cheap:
                        continue  # compute again from the new text, outside the locks
                    data, result = _apply(change, current, display)
                self._write(jail, parts, display, data)
                return result
        with self._locked() as jail:
            data, result = _apply(change, self._file_bytes(jail, parts, display), display)
            self._write(jail, parts, display, data)
            return result

    def _write(self, jail: Jail, parts: list[str], display: str, data: bytes) -> None:
        with self._guard(display, "write"):
            jail.write_atomic(self._abs(jail, parts), data)


GITIGNORE = """\
# Made by doc-processing-std-tools with this memory folder: git ignores the whole folder.
# To commit your memories, delete the line `*` (the line `.dpt*` keeps the lock marker and
# temp files out), or this whole file.
*
.dpt*
"""


def _ignore_itself(folder: Path) -> None:
    """Give a memory folder just made its own ``.gitignore``, so a memory folder in a
    project never shows up in ``git status`` and no file of the user's is edited. Only
    when the folder is made: a user who deleted it to commit the memories keeps that."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with suppress(OSError):  # made by a second launcher at the same moment, or not ours to write
        fd = os.open(folder / ".gitignore", flags, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(GITIGNORE)


def _apply(change: Callable[[str], tuple[str, R]], before: bytes, display: str) -> tuple[bytes, R]:
    """(new bytes, result) of *change* on the file's bytes *before*."""
    new_text, result = change(_decode_text(before, display))
    return _encode_text(new_text, display), result
