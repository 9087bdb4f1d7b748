"""Folder trees walked iteratively, one descriptor at a time, never following symlinks: any depth one call can make can be listed, swept and deleted."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

from ..containment import TEMP_PREFIX, remove_if_stale

if TYPE_CHECKING:
    pass


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _folder_id(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def walk_tree(
    top_fd: int,
    enter: Callable[[int, list[os.DirEntry[str]]], list[str]],
    leave: Callable[[int, str], None] | None = None,
) -> None:
    """Visit the folder *top_fd* and every real folder below it, depth first, iteratively.

    ``enter(fd, entries)`` gets each folder's descriptor and entries and returns the names
    of the subfolders to visit; ``leave(parent_fd, name)`` runs once a subfolder is done.
    Symlinks are never followed. One descriptor is held at a time, whatever the depth: the
    walk climbs back through ``..`` and checks that it is the folder it came from (device
    and inode), so a folder moved away meanwhile stops the walk instead of leading it out.
    """
    fd = os.dup(top_fd)
    try:
        with os.scandir(fd) as listing:
            levels = [("", _folder_id(fd), enter(fd, list(listing)))]
        while levels:
            pending = levels[-1][2]
            if pending:
                name = pending.pop()
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue  # gone, or swapped for a symlink or a file since the listing
                os.close(fd)
                fd = child
                with os.scandir(fd) as listing:
                    levels.append((name, _folder_id(fd), enter(fd, list(listing))))
                continue
            name = levels.pop()[0]
            if not levels:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            if _folder_id(fd) != levels[-1][1]:
                raise OSError(errno.ESTALE, "A folder was moved away during the walk", name)
            if leave is not None:
                leave(fd, name)
    finally:
        os.close(fd)


def _subfolders(entries: list[os.DirEntry[str]]) -> list[str]:
    """The names of the real folders (not symlinks) among *entries*, last first."""
    names = []
    for entry in entries:
        with suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                names.append(entry.name)
    names.sort(reverse=True)
    return names


def sweep_tree(top_fd: int) -> None:
    """Remove dead writers' temp files in a folder and all below it (see remove_if_stale)."""

    def enter(fd: int, entries: list[os.DirEntry[str]]) -> list[str]:
        for entry in entries:
            if entry.name.startswith(TEMP_PREFIX):
                remove_if_stale(fd, entry.name)
        return _subfolders(entries)

    walk_tree(top_fd, enter)


def remove_tree(parent_fd: int, name: str) -> None:
    """Delete the folder *name* of *parent_fd* with everything in it, at any depth.

    Iterative and holding one descriptor at a time (:func:`walk_tree`); symlinks are
    removed themselves, never followed.
    """

    def enter(fd: int, entries: list[os.DirEntry[str]]) -> list[str]:
        folders = _subfolders(entries)
        keep = set(folders)
        for entry in entries:
            if entry.name not in keep:
                with suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=fd)
        return folders

    def leave(fd: int, child: str) -> None:
        with suppress(FileNotFoundError):
            os.rmdir(child, dir_fd=fd)

    top = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        walk_tree(top, enter, leave)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=parent_fd)
