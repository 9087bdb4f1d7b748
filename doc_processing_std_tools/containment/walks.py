"""Listing and walking folders through descriptors: iterative, never following a symlink,
and holding a bounded number of descriptors at any depth and width (also how a tree is
deleted and swept of dead writers' temp files)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
# when needed, so no depth can exhaust descriptors.
_OPEN_FOLDERS = 64


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


@dataclass
class _Level:
    """One folder of a walk: what is left to visit in it, and how to reach it again."""

    fd: int | None  # None once closed to save descriptors (see _Walk.fd_at)
    name: str  # in its parent
    identity: tuple[int, int]  # (st_dev, st_ino): reopening must find this very folder
    pending: Iterator[Any]  # what is left to visit: entries (walk_fd) or folder names
    folder: Path = Path()  # absolute (walk_fd only)
    prefix: str = ""  # relative path from the walk's start, ending with "/" (walk_fd only)


class _Walk:
    """The stack of folders from where a walk started down to where it is now, walked without
    recursion and holding at most ``_OPEN_FOLDERS`` descriptors (level 0 is the caller's).

    Every folder is opened with ``O_NOFOLLOW`` through its parent's descriptor, so a walk
    never follows a symlink and never leaves where it started. The deepest folders stay
    open; when the walk climbs back to a closed one it opens the ``..`` of the folder it
    leaves, and only when that is not the folder it came from (moved meanwhile) reopens it
    by name from the nearest open ancestor; either way it must be the very same folder
    (device and inode), else it is stale (:meth:`fd_at` gives None).
    """

    def __init__(self, fd: int, pending: Iterator[Any], folder: Path = Path()) -> None:
        self.levels = [_Level(fd, "", _identity(fd), pending, folder)]
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

        The levels just above *index* are kept open on the way down (up to half the window),
        so reaching several closed levels in a row reopens once, not once per level.
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
            if _identity(child) != below.identity:
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

    def open_below(self, name: str) -> int:
        """A descriptor of the real folder *name* in the deepest level (OSError if it is gone,
        or not a folder, or a symlink; ESTALE if the deepest level itself was replaced)."""
        parent = self.fd_at(len(self.levels) - 1)
        if parent is None:
            raise OSError(errno.ESTALE, "A folder was replaced during the walk", name)
        return os.open(name, _DIR_FLAGS, dir_fd=parent)

    def push(
        self,
        fd: int,
        name: str,
        list_folder: Callable[[int], Iterator[Any]],
        folder: Path = Path(),
        prefix: str = "",
    ) -> None:
        """Go down into the folder *fd* (from :meth:`open_below`), whose pending items are
        ``list_folder(fd)``; the walk owns *fd* from here on (closed even if listing fails)."""
        try:
            identity = _identity(fd)
            pending = list_folder(fd)
        except BaseException:
            os.close(fd)
            raise
        self.levels.append(_Level(fd, name, identity, pending, folder, prefix))
        self.owned_open += 1
        self._trim(len(self.levels) - 1)

    def pop(self) -> str:
        """Climb back out of the deepest level; its name. A closed parent is reopened through
        the ``..`` of the folder left, when that is the parent (same device and inode)."""
        level = self.levels.pop()
        parent = self.levels[-1]
        self.low = min(self.low, len(self.levels))
        if level.fd is None:
            return level.name
        if parent.fd is None:
            try:
                up = os.open("..", _DIR_FLAGS, dir_fd=level.fd)
            except OSError:
                up = -1
            if up >= 0 and _identity(up) == parent.identity:
                parent.fd = up
                self.owned_open += 1
                self.low = min(self.low, len(self.levels) - 1)
            elif up >= 0:
                os.close(up)  # moved meanwhile: fd_at reopens it by name, or finds it stale
        os.close(level.fd)
        self.owned_open -= 1
        return level.name

    def deepest_fd(self) -> int:
        """The descriptor of the deepest level; ESTALE if it cannot be found again."""
        fd = self.fd_at(len(self.levels) - 1)
        if fd is None:
            raise OSError(errno.ESTALE, "A folder was replaced during the walk")
        return fd


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

    def entries_of(path: Path) -> Callable[[int], Iterator[Entry]]:
        return lambda child: iter(_list_fd(child, path, sweep))

    walk = _Walk(fd, entries_of(folder)(fd), folder)
    try:
        while walk.levels:
            depth = len(walk.levels)
            level = walk.levels[-1]
            entry = next(level.pending, None)
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
                try:
                    child = walk.open_below(entry.name)
                except OSError:
                    continue  # vanished, or swapped for a symlink: do not enter
                path = entry.path
                walk.push(child, entry.name, entries_of(path), path, f"{relative}/")
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


def walk_folders(
    top_fd: int,
    visit: Callable[[int], list[str]],
    leave: Callable[[int, str], None] | None = None,
    refused: Callable[[int, str, OSError], None] | None = None,
) -> None:
    """Visit the folder *top_fd* and every real folder below it, depth first, as :class:`_Walk`
    does (no recursion, a bounded number of descriptors, symlinks never followed).

    ``visit(fd)`` does its work in one folder and returns the names of the subfolders to
    enter; ``leave(parent_fd, name)`` runs once a subfolder is done; ``refused(parent_fd,
    name, error)`` runs for a name that cannot be opened as a folder (gone, or swapped for
    a symlink or a file since it was listed; skipped by default). A folder that cannot be
    found again on the way back up (replaced meanwhile) stops the walk with ESTALE.
    """
    walk = _Walk(top_fd, iter(visit(top_fd)))
    try:
        while True:
            name = next(walk.levels[-1].pending, None)
            if name is None:
                if len(walk.levels) == 1:
                    return
                done = walk.pop()
                if leave is not None:
                    leave(walk.deepest_fd(), done)
                continue
            try:
                child = walk.open_below(name)
            except OSError as error:
                if error.errno == errno.ESTALE:
                    raise
                if refused is not None:
                    refused(walk.deepest_fd(), name, error)
                continue
            walk.push(child, name, lambda fd: iter(visit(fd)))
    finally:
        walk.close()


def _subfolders(fd: int, skip: Callable[[str], bool] | None = None) -> tuple[list[str], list[str]]:
    """(real subfolders, everything else) in the folder *fd*, without the names *skip* picks;
    symlinks count as everything else (never followed)."""
    folders: list[str] = []
    others: list[str] = []
    with os.scandir(fd) as listing:
        for entry in listing:
            if skip is not None and skip(entry.name):
                continue
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_folder = False
            (folders if is_folder else others).append(entry.name)
    return folders, others


def rmtree_at(parent_fd: int, name: str) -> None:
    """Remove the folder *name* of *parent_fd* and everything below it, without recursion.

    Like ``shutil.rmtree(name, dir_fd=...)`` (symlinks are removed, never followed), but
    any depth and width works: each folder is listed once and walked by
    :func:`walk_folders` (a folder replaced while we were below it stops the removal
    with ESTALE).
    """

    def visit(fd: int) -> list[str]:
        folders, others = _subfolders(fd)
        for other in others:
            with suppress(FileNotFoundError):
                os.unlink(other, dir_fd=fd)
        return folders

    def leave(fd: int, child: str) -> None:
        os.rmdir(child, dir_fd=fd)

    def refused(fd: int, child: str, error: OSError) -> None:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a symlink or a file
            os.unlink(child, dir_fd=fd)
        elif not isinstance(error, FileNotFoundError):
            raise error

    top = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        walk_folders(top, visit, leave, refused)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=parent_fd)


def sweep_stale_temps(dir_fd: int, *, recursive: bool) -> int:
    """Remove dead writers' temp files in a folder (and, *recursive*, in every real folder
    below it, walked by :func:`walk_folders`). Returns how many were removed."""
    removed = 0

    def visit(fd: int) -> list[str]:
        nonlocal removed
        try:
            folders, others = _subfolders(fd)
        except OSError:
            return []  # gone, or unreadable: nothing to sweep there
        for name in others:
            if name.startswith(TEMP_PREFIX):
                removed += remove_if_stale(fd, name)
        return [name for name in folders if not name.startswith(TEMP_PREFIX)] if recursive else []

    with suppress(OSError):  # a folder replaced meanwhile: the rest is swept another time
        walk_folders(dir_fd, visit)
    return removed
