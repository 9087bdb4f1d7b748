"""Resolving a path inside the roots, component by component through directory descriptors.

The walk behind every confined operation: see the package docstring for why it is race-free.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from ..shared.client_text import quote
from .conventions import _DIR_FLAGS, MAX_PATH_ARGUMENT_CHARS, MAX_PATH_CHARS, RESERVED_PREFIX
from .errors import ContainmentError, ReservedName

_MAX_SYMLINKS = 40


def _close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        os.close(fd)


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


class Resolver:
    """A set of root folders, and the walk that resolves a path inside them (see :meth:`resolve`).

    :class:`~doc_processing_std_tools.containment.Jail` adds the file operations on top.
    """

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
