"""The index behind search_memory and list_memory_keys: what was read, checked against the folder on every call, and saved in the user cache for the next launcher (:mod:`.index_file`)."""

from __future__ import annotations

import gc
import hashlib
import os
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import platformdirs

from .. import APP_NAME
from ..containment import TEMP_PREFIX, Jail, remove_if_stale
from .formats import HEAD_BYTES, _decode_entry, _key_in_head
from .index_entry import LARGE, NOT_UTF8, TEXT, UNREADABLE, IndexedEntry
from .index_file import Listing, decode_index, encode_index
from .index_saving import SavedLater

MAX_INDEXED_BYTES = 1 << 20  # entries above are listed by key and matched by key only


INDEX_BUDGET_CHARS = 32 << 20  # characters of values (and folded values) kept in memory


# A file changed less than this before it was read may change again within the same
# timestamp tick, unseen by stat: it is read again until it is older (cf. git's "racy clean").
RACY_NS = 2_000_000_000


_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _entry(
    name: str,
    sig: tuple[int, int, int, int] | None,
    kind: int,
    key: str,
    size: int,
    value: str | None = None,
) -> IndexedEntry:
    folded = None
    if value is not None:
        folded = value.casefold()
        if folded == value:
            folded = value  # one string, not two
    return IndexedEntry(name, sig, kind, key, size, value, key.casefold(), folded)


def _index_dir() -> Path:
    """Where saved indexes live: the per-user cache folder (never the memory folder)."""
    return Path(platformdirs.user_cache_dir(APP_NAME)) / "memory-index"


def _entry_from_fd(name: str, fd: int, now_ns: int, keep: bool) -> IndexedEntry | None:
    """Read the entry open as *fd* (None when it is not a regular file any more)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return None
    stem = name[: -len(".json")]
    sig: tuple[int, int, int, int] | None = None
    if now_ns - info.st_ctime_ns > RACY_NS:
        sig = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    if info.st_size > MAX_INDEXED_BYTES:
        key = _key_in_head(stem, os.read(fd, HEAD_BYTES))
        return _entry(name, sig, LARGE, key, info.st_size)
    chunks = []
    size = 0
    while chunk := os.read(fd, max(info.st_size + 1 - size, 1 << 16)):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_INDEXED_BYTES:  # it grew while we read: next time it is seen as large
            key = _key_in_head(stem, b"".join(chunks)[:HEAD_BYTES])
            return _entry(name, None, LARGE, key, size)
    key, value = _decode_entry(stem, b"".join(chunks))
    if value is None:
        return _entry(name, sig, NOT_UTF8, key, size)
    return _entry(name, sig, TEXT, key, size, value if keep else None)


def _unreadable(name: str) -> IndexedEntry:
    """Present but unreadable (permissions, swapped for a symlink): listed, never matched."""
    return _entry(name, None, UNREADABLE, name[: -len(".json")], 0)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a scan makes (and keeps) 100,000s of tuples:
    the collector would walk them all again and again, doubling the time of a cold scan."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class EntryIndex(SavedLater):
    """The key-value entries of one memory folder, kept between calls and checked on each.

    Each call lists the folder (skipped while the folder's own stat is unchanged) and stats
    every entry: one whose (inode, size, mtime, ctime) is unchanged is taken from memory,
    any other is read again. So changes made behind the server's back (another launcher, an
    editor) are always seen. Files changed within :data:`RACY_NS` before they were read are
    read again on every call until they are older, so a rewrite within one timestamp tick
    cannot hide. Values are kept up to :data:`INDEX_BUDGET_CHARS` in all (others are read
    again when searched); entries over :data:`MAX_INDEXED_BYTES` are never loaded whole.

    The index is saved (in the per-user cache folder, a few seconds after a change) so that
    the first search of a new process does not read every file: it still stats them all.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()  # guards the fields below; held for no disk work
        # one scan at a time: a search arriving during the start-up scan waits for it and then
        # only checks, instead of reading every entry a second time alongside it
        self._scanning = threading.Lock()
        self._by_name: dict[str, IndexedEntry] | None = None  # None: not loaded yet
        self._trusted = 0  # how many of them have a sig (those are saved)
        self._listing: tuple[tuple[int, int, int], list[str]] | None = None

    # -- scanning -------------------------------------------------------------------

    def entries(self, jail: Jail) -> list[IndexedEntry]:
        """Every entry, sorted by file name, checked against the disk now."""
        with self._scanning:
            return self._scan(jail)

    def _scan(self, jail: Jail) -> list[IndexedEntry]:
        with _gc_paused(), jail.open_folder(str(jail.roots[0])) as (fd, _folder):
            known, known_trusted = self._by_name, self._trusted
            if known is None:
                known = self._load(fd)
                known_trusted = len(known)
            names = self._names(fd)
            fresh: dict[str, IndexedEntry] = {}
            reused = newly_trusted = 0
            now_ns = time.time_ns()
            budget = INDEX_BUDGET_CHARS
            lstat, is_reg, get = os.stat, stat.S_ISREG, known.get
            for name in names:
                try:
                    info = lstat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                entry = get(name)
                if (
                    entry is None
                    or entry.sig != (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
                    or not is_reg(info.st_mode)
                ):
                    if is_reg(info.st_mode):
                        entry = self._read(fd, name, now_ns, budget > 0)
                    elif stat.S_ISLNK(info.st_mode):
                        entry = self._read_link(jail, name, now_ns)
                    else:
                        continue  # a folder or a special file: not an entry
                    if entry is None:
                        continue
                    newly_trusted += entry.sig is not None
                else:
                    reused += 1
                if entry.value is not None:
                    if budget <= 0:  # over the budget: read again when searched
                        entry = entry.without_value()
                    budget -= entry.cost
                fresh[name] = entry
        with self._lock:
            self._by_name, self._trusted = fresh, reused + newly_trusted
            # What would be saved changed (racy files and symlinks read again are not saved).
            if newly_trusted or reused != known_trusted:
                self._schedule_save()
        return list(fresh.values())

    def _names(self, fd: int) -> list[str]:
        """The entry names (sorted), from memory while the folder's own stat is unchanged."""
        info = os.fstat(fd)
        sig = (info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
        listing = self._listing
        if listing is not None and listing[0] == sig:
            return listing[1]
        now_ns = time.time_ns()
        names = []
        for name in os.listdir(fd):
            if name[0] == ".":
                if name.startswith(TEMP_PREFIX):
                    remove_if_stale(fd, name)  # a dead writer's litter
            elif name.endswith(".json"):
                names.append(name)
        names.sort()
        self._listing = (sig, names) if now_ns - info.st_ctime_ns > RACY_NS else None
        return names

    @staticmethod
    def _read(fd: int, name: str, now_ns: int, keep: bool) -> IndexedEntry | None:
        try:
            file_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            return None  # removed while we scanned
        except OSError:
            return _unreadable(name)
        try:
            return _entry_from_fd(name, file_fd, now_ns, keep)
        except OSError:
            return _unreadable(name)
        finally:
            os.close(file_fd)

    @staticmethod
    def _read_link(jail: Jail, name: str, now_ns: int) -> IndexedEntry | None:
        """A symlinked entry, followed only while it stays inside (read every time: changes
        of its target do not show in the link's own stat)."""
        try:
            with jail.open_file(f"{jail.roots[0]}/{name}") as (handle, _real):
                entry = _entry_from_fd(name, handle.fileno(), now_ns, True)
        except (OSError, ValueError):  # escaping or broken symlink, a folder...
            return None
        return entry._replace(sig=None) if entry is not None else None

    @staticmethod
    def value_of(jail: Jail, entry: IndexedEntry) -> str | None:
        """The value of a TEXT entry, read again when it was not kept (over the budget)."""
        if entry.value is not None or entry.kind != TEXT:
            return entry.value
        again = None
        with (
            suppress(OSError, ValueError),
            jail.open_file(f"{jail.roots[0]}/{entry.name}") as (handle, _real),
        ):
            again = _entry_from_fd(entry.name, handle.fileno(), 0, True)
        return again.value if again is not None else None

    # -- the saved copy -------------------------------------------------------------

    def _path(self) -> Path:
        real = os.path.realpath(self.folder)
        return _index_dir() / f"{hashlib.sha256(os.fsencode(real)).hexdigest()[:32]}.idx"

    def _load(self, fd: int) -> dict[str, IndexedEntry]:
        """The saved index of this folder (empty when missing, foreign or damaged)."""
        try:
            data = self._path().read_bytes()
            info = os.fstat(fd)
            entries, listing = decode_index(data, (info.st_dev, info.st_ino))
            if self._listing is None:
                self._listing = listing
            return dict(zip([e.name for e in entries], entries, strict=True))
        except (OSError, ValueError, IndexError, OverflowError):
            return {}

    def preload(self) -> None:
        """Read the saved copy now, so the first search only checks it (a background thread
        started when the server is served). Nothing is trusted that the next scan does not stat."""
        if self._by_name is not None:
            return
        try:
            fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return  # no folder yet: nothing saved to read
        try:
            with _gc_paused():
                loaded = self._load(fd)
        finally:
            os.close(fd)
        with self._lock:
            if self._by_name is None and loaded:  # a scan that ran meanwhile knows better
                self._by_name, self._trusted = loaded, len(loaded)

    @property
    def loaded(self) -> bool:
        """Whether anything is known yet (a saved copy read, or a scan done)."""
        return self._by_name is not None

    def _snapshot(self) -> tuple[list[IndexedEntry], Listing | None]:
        return list((self._by_name or {}).values()), self._listing

    def _saved(self, snapshot: tuple[list[IndexedEntry], Listing | None]) -> tuple[Path, bytes]:
        entries, listing = snapshot
        info = os.stat(self.folder)
        return self._path(), encode_index(entries, (info.st_dev, info.st_ino), listing)
