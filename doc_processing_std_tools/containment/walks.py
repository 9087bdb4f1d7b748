"""Listing and walking folders through descriptors: iterative, never following a symlink,
and holding a bounded number of descriptors at any depth (also used to delete a tree)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from .conventions import _DIR_FLAGS, RESERVED_PREFIX, TEMP_PREFIX
from .temps import remove_if_stale


@dataclass(frozen=True)
class Entry:
    """One item of a directory listing (never followed when it is a symlink)."""

    name: str
    folder: Path  # absolute, inside a root
    kind: str  # "file", "dir", "symlink" or "other"
    size: int
    stat: os.stat_result

    @property
    def path(self) -> Path:
        """Absolute path of the entry (built on demand: scans of many files skip it)."""
        return self.folder / self.name


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def _read_all(fd: int, size_hint: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, max(size_hint + 1, 1 << 16)):
        chunks.append(chunk)
    return b"".join(chunks)


def _list_fd(fd: int, folder: Path, sweep: bool = True) -> list[Entry]:
    """The entries of a folder, without the reserved ``.dpt*`` names (stale temp files
    met on the way are removed when *sweep*)."""
    entries = []
    for name in sorted(os.listdir(fd)):
        if name.startswith(RESERVED_PREFIX):
            if sweep and name.startswith(TEMP_PREFIX):
                remove_if_stale(fd, name)
            continue
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed while we listed
        entries.append(Entry(name, folder, _kind(info.st_mode), info.st_size, info))
    return entries


# Folder descriptors one walk keeps open at most: deeper ones are closed and opened again
# from the nearest open ancestor when needed, so no depth can exhaust descriptors.
_OPEN_FOLDERS = 64


@dataclass
class _Level:
    """One folder of a walk: its entries still to visit, and how to reach it again."""

    fd: int | None  # None once closed to save descriptors (see _Walk.fd_at)
    name: str  # in its parent
    identity: tuple[int, int]  # (st_dev, st_ino): reopening must find this very folder
    folder: Path
    prefix: str  # relative path from the walk's start, ending with "/" ("" at the start)
    entries: Iterator[Entry]


class _Walk:
    """A stack of open folders, walked without recursion and with a bounded number of
    descriptors. Every folder is opened with ``O_NOFOLLOW`` through its parent's
    descriptor, so the walk never follows a symlink and never leaves where it started."""

    def __init__(self, fd: int, folder: Path, sweep: bool) -> None:
        info = os.fstat(fd)
        self.sweep = sweep
        self.levels = [
            _Level(
                fd, "", (info.st_dev, info.st_ino), folder, "", iter(_list_fd(fd, folder, sweep))
            )
        ]
        self.owned_open = 0
        self.low = 1  # levels 1 .. low-1 are closed

    def close(self) -> None:
        for level in self.levels[1:]:
            if level.fd is not None:
                os.close(level.fd)
                level.fd = None
        del self.levels[1:]

    def fd_at(self, index: int) -> int | None:
        """The descriptor of level *index*, reopened from its nearest open ancestor if it was
        closed; None when that folder was replaced meanwhile (then it is not walked further).

        The levels just above *index* are kept open on the way down (up to the window),
        so climbing back up a deep chain reopens once per window, not once per level.
        """
        level = self.levels[index]
        if level.fd is not None:
            return level.fd
        start = index
        while self.levels[start].fd is None:
            start -= 1
        fd = self.levels[start].fd
        assert fd is not None
        keep_from = index - _OPEN_FOLDERS // 2 + 1
        for position in range(start + 1, index + 1):
            below = self.levels[position]
            unkept = position - 1 > start and self.levels[position - 1].fd is None
            try:
                child = os.open(below.name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                child = -1
            if unkept:
                os.close(fd)  # an intermediate descriptor nobody keeps
            if child < 0:
                return None
            info = os.fstat(child)
            if (info.st_dev, info.st_ino) != below.identity:
                os.close(child)
                return None
            if position >= keep_from:
                below.fd = child
                self.owned_open += 1
                self.low = min(self.low, position)
            fd = child
        self._trim(index)
        return fd

    def _trim(self, keep: int) -> None:
        """Close the outermost owned descriptors (never level *keep*) beyond the window.

        Levels below ``self.low`` (but level 0, the caller's) are known to be closed, so
        each call scans only what it closes: no quadratic cost in the depth.
        """
        index = max(self.low, 1)
        while self.owned_open > _OPEN_FOLDERS and index < keep:
            level = self.levels[index]
            if level.fd is not None:
                os.close(level.fd)
                level.fd = None
                self.owned_open -= 1
            index += 1
        self.low = index

    def enter(self, parent_index: int, entry: Entry) -> bool:
        """Open the folder *entry* of level *parent_index* and push it; False if it cannot be."""
        parent_fd = self.fd_at(parent_index)
        if parent_fd is None:
            return False
        try:
            child = os.open(entry.name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError:
            return False  # vanished, or swapped for a symlink: do not enter
        try:
            info = os.fstat(child)
            folder = entry.path
            entries = _list_fd(child, folder, self.sweep)
        except BaseException:
            os.close(child)
            raise
        parent = self.levels[parent_index]
        self.levels.append(
            _Level(
                child,
                entry.name,
                (info.st_dev, info.st_ino),
                folder,
                f"{parent.prefix}{entry.name}/",
                iter(entries),
            )
        )
        self.owned_open += 1
        self._trim(len(self.levels) - 1)
        return True

    def pop(self) -> None:
        level = self.levels.pop()
        self.low = min(self.low, len(self.levels))
        if level.fd is not None:
            os.close(level.fd)
            self.owned_open -= 1


def walk_fd(
    fd: int,
    folder: Path,
    *,
    max_depth: int | None = None,
    exclude: Callable[[str, Entry], bool] | None = None,
    sweep: bool = True,
) -> Iterator[tuple[int, str, Entry]]:
    """Yield (depth, relative path, entry) depth-first, sorted by name, below the folder *fd*.

    Iterative (no recursion limit at any depth) and never holding more than
    ``_OPEN_FOLDERS`` descriptors. Only real folders are entered (symlinks are
    listed, never followed). *exclude* gets the relative path and the entry; an
    excluded entry is neither yielded nor entered.
    """
    walk = _Walk(fd, folder, sweep)
    try:
        while walk.levels:
            depth = len(walk.levels)
            level = walk.levels[-1]
            entry = next(level.entries, None)
            if entry is None:
                if depth == 1:
                    return
                walk.pop()
                continue
            relative = level.prefix + entry.name
            if exclude is not None and exclude(relative, entry):
                continue
            yield depth, relative, entry
            if entry.kind == "dir" and (max_depth is None or depth < max_depth):
                walk.enter(depth - 1, entry)
    finally:
        walk.close()


def _walk_fd(
    fd: int,
    folder: Path,
    depth: int,
    max_depth: int | None,
    exclude: Callable[[Entry], bool] | None = None,
) -> Iterator[tuple[int, Entry]]:
    """:func:`walk_fd` with depths counted from *depth* and an entry-only *exclude*."""
    limit = None if max_depth is None else max_depth - depth + 1
    skip = None if exclude is None else (lambda _relative, entry: exclude(entry))
    for level, _relative, entry in walk_fd(fd, folder, max_depth=limit, exclude=skip):
        yield level + depth - 1, entry


def rmtree_at(parent_fd: int, name: str) -> None:
    """Remove the folder *name* of *parent_fd* and everything below it, without recursion.

    Like ``shutil.rmtree(name, dir_fd=...)`` (symlinks are removed, never followed), but
    any depth works: folders are opened one level at a time with ``O_NOFOLLOW`` through
    their parent, and at most a window of descriptors stays open (see :class:`_Walk`;
    a folder replaced while we were below it stops the removal with ESTALE).
    """
    top = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        info = os.fstat(top)
    except BaseException:
        os.close(top)
        raise
    walk = _Walk.__new__(_Walk)
    walk.sweep = False
    walk.owned_open = 1
    walk.low = 1
    walk.levels = [
        _Level(parent_fd, "", (0, 0), Path(), "", iter(())),
        _Level(top, name, (info.st_dev, info.st_ino), Path(), "", iter(())),
    ]

    def fd_of(index: int) -> int:
        fd = walk.fd_at(index)
        if fd is None:
            raise OSError(errno.ESTALE, "Folder replaced while it was being deleted", name)
        return fd

    try:
        while len(walk.levels) > 1:
            fd = fd_of(len(walk.levels) - 1)
            with os.scandir(fd) as listing:
                names = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]
            entered = False
            for entry_name, is_dir in names:
                if is_dir:
                    try:
                        child = os.open(entry_name, _DIR_FLAGS, dir_fd=fd)
                    except FileNotFoundError:
                        continue
                    except OSError as exc:
                        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link/file
                            os.unlink(entry_name, dir_fd=fd)
                            continue
                        raise
                    found = os.fstat(child)
                    identity = (found.st_dev, found.st_ino)
                    walk.levels.append(_Level(child, entry_name, identity, Path(), "", iter(())))
                    walk.owned_open += 1
                    walk._trim(len(walk.levels) - 1)
                    entered = True
                    break
                with suppress(FileNotFoundError):
                    os.unlink(entry_name, dir_fd=fd)
            if entered:
                continue
            done = walk.levels[-1].name
            walk.pop()
            os.rmdir(done, dir_fd=fd_of(len(walk.levels) - 1))
    finally:
        walk.close()
