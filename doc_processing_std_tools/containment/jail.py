"""The file operations of a :class:`Jail`, each done through the descriptors its path
resolves to, never by a path string."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .conventions import _FILE_FLAGS
from .errors import FileTooLarge, RootChangeRefused
from .resolve import Resolver, Target
from .temps import atomic_write_at, rename_noreplace
from .walks import Entry, _list_fd, _walk_fd, rmtree_at, sweep_stale_temps, walk_fd


class Jail(Resolver):
    """Path resolution and file operations confined to a set of root folders."""

    # Listings remove the stale temp files they meet (see remove_if_stale).
    sweep_temps = True

    # -- operations -----------------------------------------------------------

    def lstat(self, path: str) -> os.stat_result:
        with self.resolve(path) as target:
            info = target.lstat()
            if info is None:
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(target.path))
            return info

    def read_bytes(self, path: str, *, limit: int | None = None) -> bytes:
        """Read a regular file; with *limit*, raise :class:`FileTooLarge` past that many bytes."""
        with self.open_file(path) as (handle, real):
            size = os.fstat(handle.fileno()).st_size
            if limit is not None and size > limit:
                raise FileTooLarge(str(real), size, limit)
            return handle.read()

    @contextmanager
    def open_file(self, path: str) -> Iterator[tuple[BinaryIO, Path]]:
        """Open a regular file for reading: yields (binary seekable handle, its path).

        The file is opened through its folder's descriptor with ``O_NOFOLLOW``
        (and ``O_NONBLOCK``, so a FIFO swapped in cannot block), then checked to
        be a regular file, so callers may read just part of a big file.
        """
        with self.resolve(path) as target:
            if target.name is None:
                raise IsADirectoryError(errno.EISDIR, "Is a directory", str(target.path))
            fd = os.open(target.name, _FILE_FLAGS, dir_fd=target.parent_fd)
            with os.fdopen(fd, "rb") as handle:
                info = os.fstat(handle.fileno())
                if stat.S_ISDIR(info.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "Is a directory", str(target.path))
                if not stat.S_ISREG(info.st_mode):
                    raise OSError(errno.EINVAL, "Not a regular file", str(target.path))
                os.set_blocking(handle.fileno(), True)
                yield handle, target.path

    def write_atomic(
        self,
        path: str,
        data: bytes,
        *,
        create_parents: bool = False,
        exclusive: bool = False,
        mode: int = 0o600,
    ) -> Path:
        """Write *data* to a temp file beside *path*, fsync it, then ``os.replace`` it in.

        A crash leaves the old content or the new one, never a mix. With
        *exclusive*, fail with FileExistsError when *path* exists. An existing
        file keeps its permission bits.
        """
        with self.resolve(path, create_parents=create_parents) as target:
            if target.name is None:
                raise IsADirectoryError(errno.EISDIR, "Is a directory", str(target.path))
            existing = target.lstat()
            if existing is not None:
                if exclusive:
                    raise FileExistsError(errno.EEXIST, "File exists", str(target.path))
                if stat.S_ISDIR(existing.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "Is a directory", str(target.path))
                mode = stat.S_IMODE(existing.st_mode)
            atomic_write_at(target.parent_fd, target.name, data, mode=mode, exclusive=exclusive)
            return target.path

    def mkdir(
        self, path: str, *, parents: bool = True, exist_ok: bool = True, mode: int = 0o700
    ) -> Path:
        """Create a folder (and missing parents), with *mode* less the umask."""
        with self.resolve(path, create_parents=parents, dir_mode=mode) as target:
            if target.name is None:
                if exist_ok:
                    return target.path
                raise FileExistsError(errno.EEXIST, "File exists", str(target.path))
            try:
                os.mkdir(target.name, mode, dir_fd=target.parent_fd)
            except FileExistsError:
                info = target.lstat()
                if not (exist_ok and info is not None and stat.S_ISDIR(info.st_mode)):
                    raise FileExistsError(errno.EEXIST, "File exists", str(target.path)) from None
            return target.path

    def remove(self, path: str, *, recursive: bool = False) -> Path:
        """Delete a file or symlink (the link itself), or a folder with *recursive*."""
        with self.resolve(path, follow_last=False) as target:
            self._refuse_root_change(target, "delete")
            assert target.name is not None  # a root was refused just above
            info = target.lstat()
            if info is None:
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(target.path))
            if stat.S_ISDIR(info.st_mode):
                if not recursive:
                    raise IsADirectoryError(errno.EISDIR, "Is a directory", str(target.path))
                rmtree_at(target.parent_fd, target.name)
            else:
                os.unlink(target.name, dir_fd=target.parent_fd)
            return target.path

    def rename(self, source: str, destination: str, *, create_parents: bool = False) -> Path:
        """Move *source* (a symlink is moved, not followed) to *destination*, never replacing."""
        with self.resolve(source, follow_last=False) as src:
            self._refuse_root_change(src, "move")
            info = src.lstat()
            if info is None:
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(src.path))

            def not_into_itself(planned: Path) -> None:
                if stat.S_ISDIR(info.st_mode) and src.path in planned.parents:
                    raise OSError(errno.EINVAL, "Cannot move a folder into itself", str(planned))

            with self.resolve(
                destination,
                follow_last=False,
                create_parents=create_parents,
                before_create=not_into_itself,
            ) as dst:
                if dst.name is None or dst.lstat() is not None:
                    raise FileExistsError(errno.EEXIST, "File exists", str(dst.path))
                assert src.name is not None  # a root was refused above
                rename_noreplace(src.parent_fd, src.name, dst.parent_fd, dst.name, str(dst.path))
                return dst.path

    def _refuse_root_change(self, target: Target, action: str) -> None:
        """Roots may be nested (``[/p, /p/sub]``): moving ``sub`` would lose a root."""
        if target.name is None or any(
            root == target.path or target.path in root.parents for root in self.roots
        ):
            raise RootChangeRefused(action, target.path)

    @contextmanager
    def open_folder(self, path: str) -> Iterator[tuple[int, Path]]:
        """A readable descriptor of the folder *path* and its absolute path."""
        with self.resolve(path) as target:
            info = target.lstat()
            if info is None:
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(target.path))
            if not stat.S_ISDIR(info.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(target.path))
            with target.open_dir() as fd:
                yield fd, target.path

    def sweep(self, path: str, *, recursive: bool = False) -> int:
        """Remove the temp files dead writers left in the folder *path* (see remove_if_stale)."""
        with self.open_folder(path) as (fd, _folder):
            return sweep_stale_temps(fd, recursive=recursive)

    def scandir(self, path: str) -> list[Entry]:
        """List a folder (sorted by name). Symlinks are reported as such, never followed."""
        with self.open_folder(path) as (fd, folder):
            return _list_fd(fd, folder, self.sweep_temps)

    def walk(
        self,
        path: str,
        *,
        max_depth: int | None = None,
        exclude: Callable[[Entry], bool] | None = None,
    ) -> Iterator[tuple[int, Entry]]:
        """Yield (depth, entry) depth-first, sorted by name, descending only into real folders.

        Depth 1 is the folder's own children. Symlinked folders are listed but
        never entered, so a walk cannot leave the roots. Entries for which
        *exclude* returns true are neither yielded nor entered.
        """
        with self.open_folder(path) as (fd, folder):
            yield from _walk_fd(fd, folder, 1, max_depth, exclude)

    def walk_relative(
        self,
        path: str,
        *,
        max_depth: int | None = None,
        exclude: Callable[[str, Entry], bool] | None = None,
    ) -> Generator[tuple[int, str, Entry], None, None]:
        """Like :meth:`walk`, yielding (depth, path relative to *path*, entry); *exclude*
        gets the relative path too. Any depth works (see :func:`walk_fd`)."""
        with self.open_folder(path) as (fd, folder):
            yield from walk_fd(
                fd, folder, max_depth=max_depth, exclude=exclude, sweep=self.sweep_temps
            )
