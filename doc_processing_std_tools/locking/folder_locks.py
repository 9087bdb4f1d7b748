"""``flock`` on the stores' folders, taken after the process lock (:func:`exclusive`), and the
markers that tell writers of other servers which folders are locked (:func:`locked_folders`)."""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import ParamSpec, TypeVar

import platformdirs

from .. import APP_NAME
from .process_lock import _acquire_for_call, _held_by_caller, _release_for_call

LOCK_FILE_NAME = ".dpt.lock"

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def file_lock(lock_path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on *lock_path* (created if missing). Blocking: worker threads only."""
    # O_NOFOLLOW: a symlink planted at the lock path must not lock (or create) a file elsewhere.
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


@contextmanager
def folder_lock(folder: str | os.PathLike[str], *, marked: bool = False) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the folder itself (its descriptor).

    Locking the folder, not a file in it, means nothing done to ``.dpt.lock`` (moved
    away, replaced by a folder) can break or split the lock. With *marked*, the marker
    in the folder is (re)made so that writers of other servers find the folder (see
    :func:`locked_folders`): memory-tools' own folder; never a filesystem root.
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if marked:
            mark(fd)
        yield
    finally:
        os.close(fd)


def mark(folder: int | str | os.PathLike[str]) -> None:
    """Create the ``.dpt.lock`` marker in a folder (a path or a descriptor) if it is missing."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        if isinstance(folder, int):
            os.close(os.open(LOCK_FILE_NAME, flags, 0o600, dir_fd=folder))
        else:
            os.close(os.open(os.path.join(folder, LOCK_FILE_NAME), flags, 0o600))
    except OSError:
        pass  # something else sits there; the lock is on the folder, so it still works


def registry() -> Path:
    """The per-user folder of markers kept outside the folders they mark.

    ``$XDG_RUNTIME_DIR``, else ``/run/user/<uid>`` (what the former is on systemd
    machines, for processes started without it), else the per-user cache folder: each is
    used only when it is a folder of this user's, so every launcher of one user on one
    machine finds the same one.
    """
    uid = os.getuid()
    for base in (os.environ.get("XDG_RUNTIME_DIR"), f"/run/user/{uid}"):
        if not base:
            continue
        try:
            info = os.stat(base)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == uid:
            return Path(base) / APP_NAME / "locked-folders"
    return Path(platformdirs.user_cache_dir(APP_NAME)) / "locked-folders"


def _identity(info: os.stat_result) -> str:
    return f"{info.st_dev:x}-{info.st_ino:x}"


def register(folder: str | os.PathLike[str]) -> None:
    """Mark *folder* as locked by its writers, in :func:`registry` rather than in the folder
    (a filesystem root is the user's project); in the folder only when that cannot be done."""
    try:
        where = registry()
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = where / _identity(os.stat(folder))
        os.close(os.open(name, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except OSError:
        mark(folder)


def locked_folders(path: str | os.PathLike[str]) -> list[Path]:
    """The folders above *path*, outermost first, that are marked: a ``.dpt.lock`` in the
    folder, or the folder's identity in :func:`registry`.

    Every writer of a file takes the flock of each of them (memory-tools: its memory
    folder; filesystem: all of them), so two writers of one file always share one.
    """
    try:
        registered = set(os.listdir(registry()))
    except OSError:
        registered = set()
    found = []
    for folder in reversed(Path(os.path.normpath(path)).parents):
        if os.path.lexists(os.path.join(folder, LOCK_FILE_NAME)):
            found.append(folder)
        elif registered:
            try:
                info = os.stat(folder)
            except OSError:
                continue
            if _identity(info) in registered:
                found.append(folder)
    return found


@contextmanager
def exclusive(
    lock_path: str | os.PathLike[str] | None = None,
    *,
    folders: Iterable[str | os.PathLike[str]] = (),
    marked: bool = False,
) -> Iterator[None]:
    """Hold the process lock, then the file lock on *lock_path* and the folder locks of *folders*
    (with *marked*, each keeps a ``.dpt.lock`` marker: see :func:`folder_lock`).

    The order is always process lock first, then the folders outermost first (by
    depth, then name), so two processes can never deadlock on each other. When the
    async caller already holds the process lock for this very call (:func:`hold_async`,
    e.g. the launcher), it is not taken again; otherwise not re-entrant.
    """
    ordered = sorted({Path(os.path.normpath(f)) for f in folders}, key=_lock_order)
    with ExitStack() as stack:
        if not _held_by_caller():
            _acquire_for_call()
            stack.callback(_release_for_call)
        if lock_path is not None:
            stack.enter_context(file_lock(lock_path))
        held: set[tuple[int, int]] = set()
        for folder in ordered:
            try:
                info = os.stat(folder)
            except OSError:
                continue  # gone: nobody can write below it through this path
            if (info.st_dev, info.st_ino) not in held:  # one folder, two spellings: lock once
                held.add((info.st_dev, info.st_ino))
                stack.enter_context(folder_lock(folder, marked=marked))
        yield


def _lock_order(folder: Path) -> tuple[int, str]:
    return len(folder.parts), str(folder)


def run_exclusive(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Call *fn* while holding the process lock (sync; for worker threads)."""
    with exclusive():
        return fn(*args, **kwargs)
