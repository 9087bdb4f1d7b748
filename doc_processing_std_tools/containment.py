"""Race-free path containment: every path is walked component by component through
directory file descriptors, so nothing can lead a read or a write outside the roots.

Why not ``realpath`` then ``open``: between the check and the use, a folder can be
swapped for a symlink (the reference filesystem server's tests admit this race).
Here each component is opened relative to the already-opened parent with
``O_NOFOLLOW``; a symlink met on the way is read and its target walked the same
way, and refused when it leads outside every root. ``..`` pops back to the parent
descriptor we came from and can never climb above a root. The last component is
used through its parent's descriptor (``dir_fd=``), never by a path string.

A :class:`Jail` holds one or more roots. Symlinks between roots are allowed.
Known limit: a folder *moved* out of a root by another program while we hold
its descriptor is still reachable through that descriptor for the rest of that
one call.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat
import time
import uuid
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .text import quote

_MAX_SYMLINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in for a file cannot block the open (regular files ignore it).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
TEMP_PREFIX = ".dpt-tmp-"
# Names the servers keep for themselves (".dpt.lock", ".dpt-tmp-*"): never listed.
RESERVED_PREFIX = ".dpt"
# A temp file no writer holds an flock on is a dead writer's litter once it is this old
# (the age covers the instant between creating a temp file and locking it).
STALE_TEMP_SECONDS = 5.0
# PATH_MAX. A longer path could only be a very deep chain of folders (names are
# at most 255 bytes); refusing it bounds how deep one call can create.
MAX_PATH_CHARS = 4096
# A path argument longer than this is refused before it is even split (``..`` and ``.``
# parts can make a usable path longer than MAX_PATH_CHARS, but not this long).
MAX_PATH_ARGUMENT_CHARS = 4 * MAX_PATH_CHARS


def _close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        os.close(fd)


class ContainmentError(PermissionError):
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


@dataclass
class Target:
    """A resolved path: its parent folder's descriptor and its own name in that folder.

    ``name`` is ``None`` when the target is a root itself, and then ``parent_fd``
    is the root's descriptor. Valid only inside :meth:`Jail.resolve`.
    """

    parent_fd: int
    name: str | None
    path: Path

    def lstat(self) -> os.stat_result | None:
        """The target's own status (a symlink is not followed), or None if missing."""
        try:
            if self.name is None:
                return os.fstat(self.parent_fd)
            return os.stat(self.name, dir_fd=self.parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    @property
    def is_root(self) -> bool:
        return self.name is None

    @contextmanager
    def open_dir(self) -> Iterator[int]:
        """A readable descriptor of the target folder (refuses a symlink swapped in)."""
        if self.name is None:
            fd = os.open(".", _DIR_FLAGS, dir_fd=self.parent_fd)
        else:
            fd = os.open(self.name, _DIR_FLAGS, dir_fd=self.parent_fd)
        try:
            yield fd
        finally:
            os.close(fd)


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _below_root(path: str, parts: list[str]) -> list[str]:
    """*parts* (a path below a root), refused when longer than MAX_PATH_CHARS."""
    length = sum(len(part) + 1 for part in parts)
    if length > MAX_PATH_CHARS:
        raise ValueError(
            f"Invalid path {quote(path, 200)}: it is {length:,} characters long below its "
            f"root; the limit is {MAX_PATH_CHARS:,}"
        )
    return parts


def _lexical_exit(pending: deque[str]) -> int | None:
    """How many of *pending* to skip when a missing folder is left again by a later ``..``.

    Called at a missing folder: a ``..`` that brings the depth below it back to
    zero climbs out of it, so the missing folder and everything up to that ``..``
    can be dropped. ``None`` when the path stays inside the missing folder.
    """
    depth = 1
    for index, part in enumerate(pending):
        depth += -1 if part == ".." else 1
        if depth == 0:
            return index + 1
    return None


def _check_names(dir_fd: int, names: Sequence[str]) -> None:
    """Refuse, before anything is created, a name the filesystem would refuse as too long."""
    try:
        limit = os.fpathconf(dir_fd, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    for name in names:
        if name != ".." and len(os.fsencode(name)) > limit:
            shown = name if len(name) <= 60 else name[:60] + "..."
            raise OSError(errno.ENAMETOOLONG, f"File name too long (over {limit} bytes)", shown)


class Jail:
    """Path resolution and file operations confined to a set of root folders."""

    def __init__(self, roots: Sequence[str | os.PathLike[str]]) -> None:
        if not roots:
            raise ValueError("a Jail needs at least one root")
        resolved: list[Path] = []
        for root in roots:
            real = Path(os.path.realpath(os.path.expanduser(os.fspath(root))))
            if not real.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "root is not a folder", str(root))
            if real not in resolved:
                resolved.append(real)
        self.roots: tuple[Path, ...] = tuple(resolved)
        # Listings remove the stale temp files they meet (see remove_if_stale).
        self.sweep_temps = True
        # The spellings a user may write a root in (as given and fully resolved).
        self._aliases: list[tuple[tuple[str, ...], int]] = []
        for index, root in enumerate(self.roots):
            self._aliases.append((root.parts, index))
        for root in roots:
            given = Path(os.path.abspath(os.path.expanduser(os.fspath(root))))
            real = Path(os.path.realpath(given))
            alias = (given.parts, self.roots.index(real))
            if alias not in self._aliases:
                self._aliases.append(alias)
        self._aliases.sort(key=lambda item: len(item[0]), reverse=True)

    # -- parsing --------------------------------------------------------------

    def locate(self, path: str) -> tuple[int, list[str]]:
        """Split *path* into (root index, components below that root).

        Relative paths are below the first root. Absolute ones must start with a
        root, compared component by component (``/root-evil`` is not ``/root``).
        """
        if len(path) > MAX_PATH_ARGUMENT_CHARS:  # refused before any split or walk
            if path.startswith("/") and not any(
                path.startswith(os.path.join(*parts, "")) for parts, _index in self._aliases
            ):
                raise ContainmentError(path, self.roots)
            raise ValueError(
                f"Invalid path {quote(path, 200)}: it is {len(path):,} characters long; the "
                f"limit is {MAX_PATH_CHARS:,} below its root"
            )
        if "\x00" in path:
            raise ValueError(f"Invalid path {quote(repr(path))}: it contains a NUL byte")
        if path == "~" or path.startswith("~/"):
            path = os.path.expanduser(path)
        if not path.startswith("/"):
            return 0, _below_root(path, _split(path))
        if path.startswith("//"):
            path = "/" + path.lstrip("/")  # POSIX keeps a leading "//"; we do not
        parts = Path(path).parts  # keeps ".." as written; only collapses "//" and "/./"
        for root_parts, index in self._aliases:
            if parts[: len(root_parts)] == root_parts:
                return index, _below_root(path, [p for p in parts[len(root_parts) :] if p != "."])
        raise ContainmentError(path, self.roots)

    def display(self, path: str) -> str:
        """The absolute form of *path* for messages (no filesystem access)."""
        try:
            index, parts = self.locate(path)
        except (ValueError, ContainmentError):
            return path
        return str(self.roots[index].joinpath(*parts))

    # -- resolution -----------------------------------------------------------

    @contextmanager
    def resolve(
        self,
        path: str,
        *,
        follow_last: bool = True,
        create_parents: bool = False,
        dir_mode: int = 0o700,
        before_create: Callable[[Path], None] | None = None,
    ) -> Iterator[Target]:
        """Walk *path* inside the roots and yield its :class:`Target`.

        Symlinks on the way are followed only while they stay inside the roots;
        the last component is followed too when *follow_last*. Missing folders on
        the way raise FileNotFoundError, or are created (with *dir_mode*, less the
        umask) with *create_parents*. The last component may be missing.

        A missing folder followed later by a ``..`` that climbs back out of it is
        skipped lexically (nothing below a missing folder can be a symlink), so
        ``new1/new2/../../x`` neither needs nor creates ``new1``. Before the first
        folder is created, every remaining name is checked against the name-length
        limit and *before_create* (if given) is called with the final path, so a
        call refused there creates nothing; if the caller's block then raises, the
        folders created here are removed again (refused calls change nothing).

        A ``..`` that climbs above a root is allowed only when the rest of the
        path, taken lexically from the root's parent, lands in a root again (a
        relative symlink from one root into a sibling root); the walk then
        continues from that root's descriptor.
        """
        with ExitStack() as fds:
            root_index, parts = self.locate(path)
            pending = deque(parts)
            stack: list[int] = []
            names: list[str] = []

            def enter_root(index: int) -> None:
                nonlocal root_index
                root_index = index
                while stack:
                    os.close(stack.pop())
                names.clear()
                stack.append(os.open(self.roots[index], _DIR_FLAGS))

            fds.callback(_close_all, stack)
            enter_root(root_index)
            links = 0
            created: list[tuple[int, str]] = []  # (dup of the parent's fd, name), in order
            fds.callback(lambda: _close_all(fd for fd, _ in created))
            while pending:
                part = pending.popleft()
                if part == "..":
                    if len(stack) == 1:
                        above = os.path.join(self.roots[root_index].parent, *pending)
                        try:
                            index, rest = self.locate(os.path.normpath(above))
                        except ContainmentError:
                            raise ContainmentError(
                                path, self.roots, via_symlink=links > 0
                            ) from None
                        enter_root(index)
                        pending = deque(rest)
                        continue
                    os.close(stack.pop())
                    names.pop()
                    continue
                last = not pending
                if part.startswith(RESERVED_PREFIX):
                    raise ReservedName(path, part)
                try:
                    info = os.stat(part, dir_fd=stack[-1], follow_symlinks=False)
                except FileNotFoundError:
                    if last:
                        break
                    climbed_out = _lexical_exit(pending)
                    if climbed_out is not None:
                        for _ in range(climbed_out):
                            pending.popleft()
                        continue
                    if not create_parents:
                        raise FileNotFoundError(
                            errno.ENOENT,
                            "No such file or directory",
                            str(self._path_of(root_index, names, part)),
                        ) from None
                    if not created:
                        _check_names(stack[-1], [part, *pending])
                        if before_create is not None:
                            planned = os.path.normpath(os.path.join(part, *pending))
                            before_create(self._path_of(root_index, names, planned))
                    try:
                        os.mkdir(part, dir_mode, dir_fd=stack[-1])
                    except FileExistsError:
                        pass
                    else:
                        created.append((os.dup(stack[-1]), part))
                    pending.appendleft(part)
                    continue
                if stat.S_ISLNK(info.st_mode) and (follow_last or not last):
                    links += 1
                    if links > _MAX_SYMLINKS:
                        raise OSError(errno.ELOOP, "Too many levels of symbolic links", path)
                    target = os.readlink(part, dir_fd=stack[-1])
                    if target.startswith("/"):
                        try:
                            index, target_parts = self.locate(target)
                        except ContainmentError:
                            raise ContainmentError(path, self.roots, via_symlink=True) from None
                        enter_root(index)
                        pending.extendleft(reversed(target_parts))
                    else:
                        pending.extendleft(reversed(_split(target)))
                    continue
                if last:
                    break
                try:
                    fd = os.open(part, _DIR_FLAGS, dir_fd=stack[-1])
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        # It is not a folder, or it was swapped for a symlink since the
                        # lstat above: resolve this component again.
                        again = os.stat(part, dir_fd=stack[-1], follow_symlinks=False)
                        if stat.S_ISLNK(again.st_mode):
                            pending.appendleft(part)
                            continue
                        raise NotADirectoryError(
                            errno.ENOTDIR,
                            "Not a directory",
                            str(self._path_of(root_index, names, part)),
                        ) from None
                    raise
                stack.append(fd)
                names.append(part)
            else:
                # The walk ended inside a folder it entered (or on a root itself).
                final: str | None = names.pop() if names else None
                if final is not None:
                    os.close(stack.pop())
                part = final  # type: ignore[assignment]  # None: the target is a root
            try:
                yield Target(
                    stack[-1],
                    part,
                    self._path_of(root_index, names, *([part] if part else [])),
                )
            except BaseException:
                for parent_fd, name in reversed(created):
                    with suppress(OSError):  # not empty any more: someone else uses it
                        os.rmdir(name, dir_fd=parent_fd)
                raise

    def _path_of(self, root_index: int, names: list[str], *more: str) -> Path:
        return self.roots[root_index].joinpath(*names, *more)

    def realpath(self, path: str) -> Path:
        """The absolute path *path* leads to inside the roots (it need not exist)."""
        with self.resolve(path) as target:
            return target.path

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

    def scan_files(
        self, path: str, select: Callable[[str], bool] | None = None
    ) -> Iterator[tuple[Entry, bytes | None]]:
        """Each entry of a folder (sorted by name; *select* filters by name) with the
        content of the regular files, read through the one folder descriptor.

        The fast path for scanning many small files: no per-file path walk. Other
        entries (symlinks included) and unreadable files come with ``None``;
        resolve symlinks with :meth:`read_bytes` if needed.
        """
        with self.open_folder(path) as (fd, folder):
            for entry in _list_fd(fd, folder, self.sweep_temps):
                if select is not None and not select(entry.name):
                    continue
                if entry.kind != "file":
                    yield entry, None
                    continue
                try:
                    file_fd = os.open(entry.name, _FILE_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue  # removed while we scanned
                except OSError:
                    yield entry, None  # unreadable (permissions, swapped for a symlink)
                    continue
                try:
                    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
                        continue  # swapped for something else since the listing
                    yield entry, _read_all(file_fd, entry.size)
                finally:
                    os.close(file_fd)

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


class ReservedName(PermissionError):
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


class RootChangeRefused(PermissionError):
    """Deleting or moving a root folder, or a folder that holds one, is never allowed."""

    def __init__(self, action: str, path: Path) -> None:
        super().__init__(
            errno.EPERM, f"Refusing to {action} a root folder (or one holding a root)", str(path)
        )


class FileTooLarge(OSError):
    """A file over the configured read limit."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(errno.EFBIG, f"File is {size} bytes, over the {limit}-byte limit", path)


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


def sweep_stale_temps(dir_fd: int, *, recursive: bool) -> int:
    """Remove dead writers' temp files in a folder (and, *recursive*, below it; iterative,
    real folders only). Returns how many were removed."""
    removed = 0
    pending = [os.dup(dir_fd)]
    while pending:
        fd = pending.pop()
        try:
            for name in os.listdir(fd):
                if name.startswith(TEMP_PREFIX):
                    removed += remove_if_stale(fd, name)
                elif recursive:
                    with suppress(OSError):  # not a folder, a symlink, or gone
                        pending.append(os.open(name, _DIR_FLAGS, dir_fd=fd))
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


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
