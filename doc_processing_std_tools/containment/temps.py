"""Atomic writes and their temp files: write, fsync and rename into place under an flock,
rename without replacing, and remove a temp file a dead writer left (walks.sweep_stale_temps
sweeps a tree)."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat
import time
import uuid
from contextlib import suppress

from .conventions import STALE_TEMP_SECONDS, TEMP_PREFIX


def remove_if_stale(dir_fd: int, name: str) -> bool:
    """Remove the temp file *name* if its writer is gone; whether it was removed.

    A writer holds an exclusive ``flock`` on its temp file from just after creating
    it until it is renamed into place, so a temp file that can be locked, and is
    older than :data:`STALE_TEMP_SECONDS`, was left by a writer that died.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or time.time() - info.st_mtime < STALE_TEMP_SECONDS:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a live writer holds it
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return False
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            return False  # renamed into place and replaced meanwhile
        os.unlink(name, dir_fd=dir_fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def atomic_write_at(
    dir_fd: int, name: str, data: bytes, *, mode: int = 0o600, exclusive: bool = False
) -> None:
    """Write *name* in the folder *dir_fd* through a fsynced temp file and ``os.replace``.

    With *exclusive*, the temp file is linked in with no-replace semantics, so an
    existing file is never overwritten even by a racing writer.
    """
    temp = f"{TEMP_PREFIX}{uuid.uuid4().hex}"
    fd = os.open(
        temp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        mode,
        dir_fd=dir_fd,
    )
    try:
        # Held until the rename: a temp file nobody holds is a dead writer's (remove_if_stale).
        fcntl.flock(fd, fcntl.LOCK_EX)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fchmod(fd, mode)
        os.fsync(fd)
        if exclusive:
            rename_noreplace(dir_fd, temp, dir_fd, name, name)
        else:
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    finally:
        os.close(fd)
    with suppress(OSError):  # some filesystems refuse fsync on a folder
        os.fsync(dir_fd)


_RENAME_NOREPLACE = 1


def _renameat2() -> object | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


_RENAMEAT2 = _renameat2()


def rename_noreplace(src_fd: int, src: str, dst_fd: int, dst: str, shown: str) -> None:
    """``renameat2(RENAME_NOREPLACE)``: an existing destination is never replaced."""
    if _RENAMEAT2 is not None:
        result = _RENAMEAT2(src_fd, os.fsencode(src), dst_fd, os.fsencode(dst), _RENAME_NOREPLACE)  # type: ignore[operator]
        if result == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            if err == errno.EEXIST:
                raise FileExistsError(err, "File exists", shown)
            raise OSError(err, os.strerror(err), shown)
    # Fallback (filesystems without renameat2): check, then rename. Callers hold the lock.
    try:
        os.stat(dst, dir_fd=dst_fd, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
    else:
        raise FileExistsError(errno.EEXIST, "File exists", shown)
