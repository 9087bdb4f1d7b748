"""The ``filesystem`` server: the reference MCP filesystem tools, confined to root folders.

Tool names and parameters follow ``@modelcontextprotocol/server-filesystem``. Every
path goes through :class:`~doc_processing_std_tools.containment.Jail`, which walks
each component through directory descriptors, so neither ``..``, absolute paths
nor symlinks (even ones swapped in while a call runs) lead outside the roots.
Every change runs under :func:`doc_processing_std_tools.locking.exclusive`.

The tool logic lives in :class:`FileSystem` (plain Python, raises
:class:`FileSystemError` with the user-facing message); :func:`create_server`
only wires it to FastMCP.

Roots, in this order: the ``roots`` setting; ``$DPTTOOLS_FS_ROOTS``; the client's
MCP roots (per session, see :mod:`~doc_processing_std_tools.workspace`); the
working directory, only when it looks like a project. With none of them the
tools stay listed and refuse every path with the fix.

Run it alone over stdio: ``python -m doc_processing_std_tools.filesystem [ROOT ...]``.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import stat
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import closing, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from . import locking, workspace
from .containment import ContainmentError, FileTooLarge, Jail, ReservedName
from .diffs import unified_lines
from .globs import GlobError, Globs, check_pattern
from .globs import glob_match as glob_match  # re-exported: the one-pattern matcher
from .settings import ServerSettings, resolve_path
from .text import bounded, quote, sendable

if TYPE_CHECKING:
    from fastmcp import FastMCP

__all__ = [
    "ROOTS_ENV",
    "EditOperation",
    "FileSystem",
    "FileSystemError",
    "SessionFileSystems",
    "Settings",
    "create_server",
]

SERVER_NAME = "filesystem"
# Every state-changing tool takes locking.PROCESS_LOCK itself, so the launcher must
# not hold it around them (the lock is not re-entrant: that would deadlock).
LOCKS_ITSELF = True
ROOTS_ENV = "DPTTOOLS_FS_ROOTS"
_CHUNK = 64 * 1024

_MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
    ".mp3": "audio/mpeg",
    ".wav": "audio/wav",
    ".ogg": "audio/ogg",
    ".oga": "audio/ogg",
    ".flac": "audio/flac",
    ".m4a": "audio/mp4",
    ".aac": "audio/aac",
    ".pdf": "application/pdf",
}


# -- settings -------------------------------------------------------------------


def _default_roots() -> list[str]:
    """From the environment, relative to the working directory (as for DPTTOOLS_MEMORY_DIR).

    Empty when unset: the client's roots, then the working directory, are chosen
    when the server is built (:func:`fixed_roots`), never here.
    """
    value = os.environ.get(ROOTS_ENV, "")
    return [os.path.abspath(os.path.expanduser(p)) for p in value.split(os.pathsep) if p.strip()]


class Settings(ServerSettings):
    """Settings of the ``filesystem`` server."""

    roots: list[Path] = Field(
        default_factory=_default_roots,
        validate_default=True,
        description=(
            f"Folders the tools may use (relative ones against the config file's folder). "
            f"Default: ${ROOTS_ENV} ({os.pathsep}-separated), else the client's MCP roots, "
            "else the working directory when it is a project folder (never /, your home "
            "folder, a system or cache folder)."
        ),
    )
    read_only: bool = Field(False, description="Register only the tools that do not write.")
    max_read_bytes: int = Field(
        5 * 1024 * 1024,
        gt=0,
        description="Largest file read whole; bigger ones need head or tail.",
    )
    max_entries: int = Field(
        10_000, gt=0, description="Most entries directory_tree and search_files visit."
    )

    @field_validator("roots", mode="before")
    @classmethod
    def _split_string(cls, value: Any) -> Any:
        if isinstance(value, str | os.PathLike):
            return [part for part in os.fspath(value).split(os.pathsep) if part.strip()]
        return value

    @field_validator("roots")
    @classmethod
    def _resolve_roots(cls, value: list[Path], info: ValidationInfo) -> list[Path]:
        resolved = []
        for root in value:
            path = resolve_path(root, info)
            if not path.is_dir():
                problem = "does not exist" if not path.exists() else "is not a folder"
                raise ValueError(f"root {str(path)!r} {problem}")
            resolved.append(path)
        return resolved

    @model_validator(mode="after")
    def _roots_not_empty(self) -> Settings:
        if "roots" in self.model_fields_set and not self.roots:
            raise ValueError(
                f"roots must list at least one folder; leave it out to use ${ROOTS_ENV} "
                "or the client's roots"
            )
        return self


# -- where the roots come from ----------------------------------------------------


def fixed_roots(settings: Settings) -> tuple[str, list[Path], str | None]:
    """(source, roots, why the working directory is not used), known before any client.

    The source is ``setting``, ``variable``, ``working directory`` (used only when
    the client sends no roots) or ``none``.
    """
    if settings.roots:
        source = "setting" if "roots" in settings.model_fields_set else "variable"
        return source, list(settings.roots), None
    cwd = Path(os.getcwd())
    reason = workspace.unsuitable_reason(cwd)
    if reason is None:
        return "working directory", [cwd], None
    return "none", [], f"the working directory {cwd} is not used: {reason}"


def no_roots_message(why: str | None) -> str:
    """The one-line fix shown whenever no folder is allowed."""
    return (
        "No folder is allowed: set 'roots' in the filesystem settings of the dpt-launch "
        f"config or ${ROOTS_ENV}, or use a client that sends MCP roots"
        + (f" ({why})" if why else "")
    )


class SessionFileSystems:
    """The :class:`FileSystem` for the tool call running now.

    Fixed roots (setting, variable) give one instance. Otherwise each call takes the
    calling session's client roots (one jail per distinct root set, cached), else
    the project-like working directory, else refuses with :func:`no_roots_message`.
    Tool methods are looked up per call: ``systems.read_text_file(...)``.
    """

    MAX_CACHED = 32

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.source, roots, self.why = fixed_roots(settings)
        try:
            jail = Jail(roots) if roots else None
        except OSError as exc:
            raise ValueError(
                f"filesystem setting 'roots': {exc.filename} does not exist or is not a folder"
            ) from None
        self.fixed = (
            FileSystem(jail, settings) if jail and self.source != "working directory" else None
        )
        self.fallback = FileSystem(jail, settings) if jail and self.fixed is None else None
        self._by_roots: OrderedDict[tuple[Path, ...], FileSystem] = OrderedDict()
        self._lock = threading.Lock()

    def _for(self, roots: list[Path]) -> FileSystem:
        key = tuple(roots)
        with self._lock:
            found = self._by_roots.get(key)
            if found is not None:
                self._by_roots.move_to_end(key)
                return found
        try:
            fs = FileSystem(Jail(roots), self.settings)
        except OSError as exc:
            raise FileSystemError(f"The client's root {exc.filename} is not a folder") from None
        with self._lock:
            self._by_roots[key] = fs
            while len(self._by_roots) > self.MAX_CACHED:
                self._by_roots.popitem(last=False)
        return fs

    def current(self) -> FileSystem | None:
        if self.fixed is not None:
            return self.fixed
        try:
            roots = workspace.current_client_roots()
        except workspace.ClientRootsError as exc:
            raise FileSystemError(str(exc)) from None
        return self._for(roots) if roots else self.fallback

    def require(self) -> FileSystem:
        fs = self.current()
        if fs is None:
            raise FileSystemError(no_roots_message(self.why))
        return fs

    def list_allowed_directories(self) -> str:
        fs = self.current()
        if fs is None:
            return "No directory is allowed yet.\n" + no_roots_message(self.why)
        return fs.list_allowed_directories()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)

        def method(*args: Any) -> Any:
            return getattr(self.require(), name)(*args)

        return method


# -- tool logic -----------------------------------------------------------------


class FileSystemError(Exception):
    """A tool failed; the message is meant for the user (the model)."""


class EditOperation(BaseModel):
    """One replacement of ``edit_file``."""

    model_config = ConfigDict(extra="forbid")

    oldText: str = Field(description="Text to search for - must match exactly")
    newText: str = Field(description="Text to replace with")


def format_size(size: int) -> str:
    """``1.50 KB`` style sizes, like the reference server."""
    units = ["B", "KB", "MB", "GB", "TB"]
    if size < 1024:
        return f"{max(size, 0)} B"
    value = float(size)
    unit = 0
    while value >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    return f"{value:.2f} {units[unit]}"


# directory_tree shows folders this deep at most (deeper ones: call it again lower down);
# a JSON tree is nested as deep as the folders, and its reader must cope with it.
MAX_TREE_DEPTH = 100


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _timestamp(value: float) -> str:
    return datetime.fromtimestamp(value, tz=UTC).isoformat(timespec="seconds")


class FileSystem:
    """The filesystem tools as plain methods. Errors raise :class:`FileSystemError`."""

    def __init__(self, jail: Jail, settings: Settings) -> None:
        self.jail = jail
        self.settings = settings
        # Dead writers' temp files are removed from the roots at start and wherever a
        # listing meets them, unless the server must not write at all.
        jail.sweep_temps = not settings.read_only
        if not settings.read_only:
            for root in jail.roots:
                locking.mark(root)  # other launchers on this root then take its flock too
                with suppress(OSError):
                    jail.sweep(str(root))
        umask = _umask()
        self.file_mode = 0o666 & ~umask
        self.dir_mode = 0o777

    # -- helpers ------------------------------------------------------------

    def _fail(self, exc: BaseException, path: str) -> FileSystemError:
        """Turn an exception into a readable :class:`FileSystemError`."""
        if isinstance(exc, FileSystemError):
            return exc
        if isinstance(exc, ContainmentError | ReservedName):
            return FileSystemError(str(exc))
        if isinstance(exc, FileTooLarge):
            return FileSystemError(
                f"{exc.filename} is {exc.size} bytes, over the max_read_bytes limit of "
                f"{exc.limit}; use the head or tail parameter to read part of it"
            )
        if isinstance(exc, UnicodeError):
            return FileSystemError(f"{self.jail.display(path)} is not a UTF-8 text file")
        if isinstance(exc, ValueError):
            return FileSystemError(str(exc))
        if isinstance(exc, OSError):
            where = exc.filename
            if not (isinstance(where, str) and where.startswith("/")):
                where = self.jail.display(path)  # a bare name: show the whole path
            what = exc.strerror or os.strerror(exc.errno or 0) or type(exc).__name__
            if exc.errno == errno.ELOOP:
                what = "Too many levels of symbolic links (or a symlink where a folder was)"
            return FileSystemError(f"{what}: {quote(where)}")
        return FileSystemError(f"{type(exc).__name__}: {exc}")

    def _guard(self, path: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (OSError, ValueError, FileSystemError) as exc:
            raise self._fail(exc, path) from exc

    def _locks(self, *paths: str) -> set[Path]:
        """The marked folders (roots, memory folders) above *paths*, whose flocks a write
        there must hold so other launchers and memory-tools never interleave with it."""
        folders: set[Path] = set()
        for path in paths:
            try:
                with self.jail.resolve(path, follow_last=False) as target:
                    where = target.path
            except (ValueError, PermissionError):
                continue  # refused below with a clear message, before any change
            except OSError:  # e.g. missing parent folders, which create_directory makes
                where = Path(self.jail.display(path))
            folders.update(locking.locked_folders(where))
        return folders

    # -- reading --------------------------------------------------------------

    def list_allowed_directories(self) -> str:
        return "Allowed directories:\n" + "\n".join(str(root) for root in self.jail.roots)

    def read_text_file(self, path: str, head: int | None = None, tail: int | None = None) -> str:
        if head is not None and tail is not None:
            raise FileSystemError("Cannot specify both head and tail parameters simultaneously")
        for name, value in (("head", head), ("tail", tail)):
            if value is not None and value < 0:
                raise FileSystemError(f"{name} must be 0 or more, got {value}")

        def read() -> str:
            if head is None and tail is None:
                data = self.jail.read_bytes(path, limit=self.settings.max_read_bytes)
                return data.decode("utf-8", errors="replace")
            with self.jail.open_file(path) as (handle, _real):
                if head is not None:
                    return self._head(handle, head)
                return self._tail(handle, tail or 0)

        return self._guard(path, read)

    def _truncated_note(self) -> str:
        return (
            f"\n[output truncated at max_read_bytes={self.settings.max_read_bytes}; "
            "ask for fewer lines]"
        )

    def _head(self, handle: Any, lines: int) -> str:
        if lines == 0:
            return ""
        limit = self.settings.max_read_bytes
        data = bytearray()
        newlines = 0
        while newlines < lines and len(data) <= limit:
            chunk = handle.read(_CHUNK)
            if not chunk:
                break
            data += chunk
            newlines += chunk.count(b"\n")
        cut = -1
        for _ in range(min(lines, newlines)):
            cut = data.index(b"\n", cut + 1)
        body = bytes(data[:cut] if newlines >= lines else data)
        if newlines >= lines:
            body = body.removesuffix(b"\r")
        truncated = len(body) > limit
        text = body[:limit].decode("utf-8", errors="replace").replace("\r\n", "\n")
        if newlines < lines:
            text = text.removesuffix("\n")
        return text + (self._truncated_note() if truncated else "")

    def _tail(self, handle: Any, lines: int) -> str:
        if lines == 0:
            return ""
        limit = self.settings.max_read_bytes
        position = handle.seek(0, os.SEEK_END)
        chunks: list[bytes] = []
        total = newlines = 0
        final_newline = False
        # A newline before the wanted lines marks where they begin; the newline
        # at the very end of the file does not start a line.
        while position > 0 and total <= limit:
            size = min(_CHUNK, position)
            position -= size
            handle.seek(position)
            chunk = handle.read(size)
            if not chunks:
                final_newline = chunk.endswith(b"\n")
            chunks.append(chunk)
            total += len(chunk)
            newlines += chunk.count(b"\n")
            if newlines - final_newline >= lines:
                break
        data = b"".join(reversed(chunks)).replace(b"\r\n", b"\n")
        body = data[:-1] if data.endswith(b"\n") else data
        parts = body.split(b"\n")
        wanted = b"\n".join(parts[-lines:])
        truncated = len(wanted) > limit or (position > 0 and len(parts) <= lines)
        text = wanted[-limit:].decode("utf-8", errors="replace")
        return text + (self._truncated_note() if truncated else "")

    def read_media_file(self, path: str) -> tuple[str, str, str, Path]:
        """(kind, MIME type, base64 data, real path); kind is image, audio or blob."""

        def read() -> tuple[str, str, str, Path]:
            with self.jail.open_file(path) as (handle, real):
                size = os.fstat(handle.fileno()).st_size
                if size > self.settings.max_read_bytes:
                    raise FileTooLarge(str(real), size, self.settings.max_read_bytes)
                data = handle.read()
            mime = _MEDIA_TYPES.get(real.suffix.lower(), "application/octet-stream")
            kind = mime.split("/")[0] if mime.startswith(("image/", "audio/")) else "blob"
            return kind, mime, base64.b64encode(data).decode("ascii"), real

        return self._guard(path, read)

    def read_multiple_files(self, paths: Sequence[str]) -> str:
        if not paths:
            raise FileSystemError("At least one file path must be provided")
        results = []
        for path in paths:
            try:
                results.append(f"{path}:\n{self.read_text_file(path)}\n")
            except FileSystemError as exc:
                results.append(f"{quote(path, 200)}: Error - {exc}")
        return "\n---\n".join(results)

    def list_directory(self, path: str) -> str:
        entries = self._guard(path, lambda: self.jail.scandir(path))
        return "\n".join(
            f"{'[DIR]' if entry.kind == 'dir' else '[FILE]'} {entry.name}" for entry in entries
        )

    def list_directory_with_sizes(self, path: str, sort_by: str = "name") -> str:
        if sort_by not in ("name", "size"):
            raise FileSystemError(f"sortBy must be 'name' or 'size', got {sort_by!r}")
        entries = self._guard(path, lambda: self.jail.scandir(path))
        if sort_by == "size":
            entries = sorted(entries, key=lambda e: (e.kind == "dir", -e.size, e.name))
        lines = []
        files = dirs = total = 0
        for entry in entries:
            if entry.kind == "dir":
                dirs += 1
                lines.append(f"[DIR] {entry.name:<30}")
            else:
                files += 1
                total += entry.size
                lines.append(f"[FILE] {entry.name:<30} {format_size(entry.size):>10}")
        lines += ["", f"Total: {files} files, {dirs} directories"]
        lines.append(f"Combined size: {format_size(total)}")
        return "\n".join(lines)

    def directory_tree(self, path: str, exclude_patterns: Sequence[str] = ()) -> str:
        excluded = self._globs(exclude_patterns, "excludePatterns", anywhere=True)
        cut: list[str] = []  # folders at MAX_TREE_DEPTH whose contents are left out

        def build() -> tuple[list[dict[str, Any]], bool]:
            top: list[dict[str, Any]] = []
            stack: list[list[dict[str, Any]]] = [top]
            walk = self.jail.walk_relative(
                path,
                max_depth=MAX_TREE_DEPTH,
                exclude=lambda relative, _entry: excluded.match(relative),
            )
            with closing(walk):
                for seen, (depth, relative, entry) in enumerate(walk):
                    if seen >= self.settings.max_entries:
                        return top, True
                    del stack[depth:]
                    node: dict[str, Any] = {
                        "name": entry.name,
                        "type": "directory" if entry.kind == "dir" else "file",
                    }
                    stack[-1].append(node)
                    if entry.kind == "dir":
                        node["children"] = []
                        stack.append(node["children"])
                        if depth == MAX_TREE_DEPTH:
                            cut.append(relative)
            return top, False

        tree, truncated = self._guard(path, build)
        text = json.dumps(tree, indent=2, ensure_ascii=False)
        if cut:
            deeper = os.path.join(self.jail.display(path), cut[0])
            text += (
                f"\n\n[{len(cut)} folder(s) at depth {MAX_TREE_DEPTH} are shown without "
                f"their contents (the tree's depth limit); call directory_tree on a deeper "
                f"path, e.g. {quote(deeper, 300)}]"
            )
        if truncated:
            text += (
                f"\n\n[Stopped at max_entries={self.settings.max_entries} entries: the tree "
                "is incomplete; pick a deeper path or add excludePatterns]"
            )
        return text

    def _globs(self, patterns: Sequence[str], what: str, *, anywhere: bool = False) -> Globs:
        try:
            return Globs(patterns, anywhere=anywhere, what=what)
        except GlobError as exc:
            raise FileSystemError(f"Invalid {what}: {exc}") from None

    def search_files(self, path: str, pattern: str, exclude_patterns: Sequence[str] = ()) -> str:
        if not pattern:
            raise FileSystemError("pattern must not be empty")
        try:
            check_pattern(pattern)
        except GlobError as exc:
            raise FileSystemError(str(exc)) from None
        wanted = self._globs([pattern], "pattern")
        excluded = self._globs(exclude_patterns, "excludePatterns")

        def search() -> tuple[list[str], bool]:
            matches: list[str] = []
            walk = self.jail.walk_relative(
                path, exclude=lambda relative, _entry: excluded.match(relative)
            )
            with closing(walk):
                for seen, (_depth, relative, entry) in enumerate(walk):
                    if seen >= self.settings.max_entries:
                        return matches, True
                    if wanted.match(relative):
                        matches.append(str(entry.path))
            return matches, False

        matches, truncated = self._guard(path, search)
        text = "\n".join(matches) if matches else "No matches found"
        if truncated:
            text += (
                f"\n[Search stopped after max_entries={self.settings.max_entries} entries: "
                "results may be incomplete; search a deeper path or add excludePatterns]"
            )
        return text

    def get_file_info(self, path: str) -> str:
        def info() -> str:
            with self.jail.resolve(path) as target:
                st = target.lstat()
                if st is None:
                    raise FileNotFoundError(
                        errno.ENOENT, "No such file or directory", str(target.path)
                    )
                real = target.path
            created = getattr(st, "st_birthtime", None)
            fields = {
                "path": str(real),
                "size": st.st_size,
                "created": _timestamp(created if created is not None else st.st_ctime),
                "modified": _timestamp(st.st_mtime),
                "accessed": _timestamp(st.st_atime),
                "isDirectory": stat.S_ISDIR(st.st_mode),
                "isFile": stat.S_ISREG(st.st_mode),
                "permissions": f"{stat.S_IMODE(st.st_mode):03o}",
            }
            return "\n".join(
                f"{key}: {str(value).lower() if isinstance(value, bool) else value}"
                for key, value in fields.items()
            )

        return self._guard(path, info)

    # -- writing (each under the process lock) ---------------------------------

    def write_file(self, path: str, content: str) -> str:
        def write() -> None:
            with locking.exclusive(folders=self._locks(path)):
                try:
                    self.jail.write_atomic(path, content.encode("utf-8"), mode=self.file_mode)
                except FileNotFoundError as exc:
                    raise FileSystemError(
                        f"Parent directory does not exist: {exc.filename}"
                    ) from None

        self._guard(path, write)
        return f"Successfully wrote to {path}"

    def create_directory(self, path: str) -> str:
        def mkdir() -> None:
            with locking.exclusive(folders=self._locks(path)):
                self.jail.mkdir(path, parents=True, exist_ok=True, mode=self.dir_mode)

        self._guard(path, mkdir)
        return f"Successfully created directory {path}"

    def move_file(self, source: str, destination: str) -> str:
        def move() -> None:
            with locking.exclusive(folders=self._locks(source, destination)):
                with self.jail.resolve(source, follow_last=False) as target:
                    missing = target.lstat() is None
                if missing:
                    raise FileSystemError(f"No such file or directory: {self.jail.display(source)}")
                try:
                    self.jail.rename(source, destination)
                except FileNotFoundError as exc:
                    raise FileSystemError(
                        f"Parent directory does not exist: {exc.filename}"
                    ) from None
                except FileExistsError:
                    raise FileSystemError(
                        f"Destination already exists: {self.jail.display(destination)}"
                    ) from None

        self._guard(source, move)
        return f"Successfully moved {source} to {destination}"

    def edit_file(self, path: str, edits: Sequence[tuple[str, str]], dry_run: bool = False) -> str:
        """Match and diff with no lock held (the slow part, linear in the file's size), then,
        under the locks, write only if the file still holds what was matched."""
        if not edits:
            raise FileSystemError("edits must contain at least one {oldText, newText} pair")
        limit = self.settings.max_read_bytes
        size = sum(len(old) + len(new) for old, new in edits)
        if size > limit:
            raise FileSystemError(
                f"edits hold {size:,} characters; the limit is max_read_bytes={limit:,} "
                "(for bigger changes use write_file)"
            )
        shown = self.jail.display(path)

        def plan() -> tuple[bytes, str, str, bool]:
            raw = self.jail.read_bytes(path, limit=limit)
            original = raw.decode("utf-8")
            crlf = "\r\n" in original and original.count("\r\n") == original.count("\n")
            text = original.replace("\r\n", "\n") if crlf else original
            modified = text
            for old, new in edits:
                modified = apply_edit(modified, old, new, crlf=crlf)
            return raw, text, modified, crlf

        def edit() -> str:
            for _attempt in range(EDIT_ATTEMPTS - 1):
                raw, text, modified, crlf = plan()
                diff = unified_diff(text, modified, shown)
                if dry_run or modified == text:
                    return diff
                out = (modified.replace("\n", "\r\n") if crlf else modified).encode("utf-8")
                with locking.exclusive(folders=self._locks(path)):
                    if self.jail.read_bytes(path, limit=limit) == raw:
                        self.jail.write_atomic(path, out)
                        return diff
                # Another writer changed the file while we matched: match again.
            # Writers keep changing it: match under the locks this time (linear, so bounded).
            with locking.exclusive(folders=self._locks(path)):
                _raw, text, modified, crlf = plan()
                if not dry_run and modified != text:
                    out = (modified.replace("\n", "\r\n") if crlf else modified).encode("utf-8")
                    self.jail.write_atomic(path, out)
            return unified_diff(text, modified, shown)

        return self._guard(path, edit)


# edit_file matches without the lock, then writes only if the file is unchanged; when other
# writers keep changing the file, its last attempt (of this many) matches under the locks.
EDIT_ATTEMPTS = 3


def apply_edit(text: str, old: str, new: str, *, crlf: bool = False) -> str:
    """Replace the first match of *old* in *text* (LF line endings) with *new*.

    Exact match first; else the first run of lines equal to *old*'s lines ignoring
    leading/trailing whitespace, replaced by *new* re-indented to the match. Both
    searches are one substring search (linear in the text, whatever *old* is): the
    whitespace-flexible one looks for *old*'s stripped lines in the file's stripped
    lines, joined by newlines and framed by newlines so only whole lines match.
    """
    if crlf or "\r\n" not in text:
        old = old.replace("\r\n", "\n")
        new = new.replace("\r\n", "\n")
    if not old:
        raise FileSystemError("oldText must not be empty")
    at = text.find(old)
    if at >= 0:
        return text[:at] + new + text[at + len(old) :]
    old_lines = old.strip("\n").split("\n")
    lines = text.split("\n")
    wanted = "\n" + "\n".join(line.strip() for line in old_lines) + "\n"
    haystack = "\n" + "\n".join(line.strip() for line in lines) + "\n"
    found = haystack.find(wanted)
    if found < 0:
        raise FileSystemError(f"Could not find exact match for edit:\n{quote(old)}")
    i = haystack.count("\n", 0, found)  # the line the match starts on
    base = _indent(lines[i])
    new_lines = new.strip("\n").split("\n")
    first = _indent(new_lines[0])
    fitted = []
    for line in new_lines:
        if not line.strip():
            fitted.append("")
            continue
        own = _indent(line)
        extra = own[len(first) :] if own.startswith(first) else ""
        fitted.append(base + extra + line.lstrip())
    lines[i : i + len(old_lines)] = fitted
    return "\n".join(lines)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def unified_diff(before: str, after: str, path: str) -> str:
    """A git-style unified diff in a Markdown ``diff`` fence (fence longer than any backtick run)."""
    lines = list(
        unified_lines(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            path,
            path,
            "original",
            "modified",
        )
    )
    body = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}diff\n{body}{fence}\n\n"


# -- FastMCP wiring ---------------------------------------------------------------

PathArg = Annotated[
    str,
    Field(
        description=(
            "Path of the file or folder: absolute inside an allowed directory, "
            "or relative to the first allowed directory"
        )
    ),
]

HeadArg = Annotated[
    int | None,
    Field(ge=0, description="If provided, returns only the first N lines of the file"),
]
TailArg = Annotated[
    int | None,
    Field(ge=0, description="If provided, returns only the last N lines of the file"),
]
TreeExcludeArg = Annotated[
    list[str],
    Field(
        description=(
            "Glob patterns (relative to path) of entries to leave out, with everything "
            "below them; a pattern without '*' also matches that name at any depth"
        )
    ),
]

_READ = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}


def _writes(*, destructive: bool, idempotent: bool) -> dict[str, bool]:
    return {
        "readOnlyHint": False,
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
        "openWorldHint": False,
    }


def create_server(settings: Settings) -> FastMCP:
    """Build the ``filesystem`` server on *settings* (roots must exist)."""
    from fastmcp import FastMCP
    from fastmcp.exceptions import ToolError
    from mcp.types import AudioContent, BlobResourceContents, EmbeddedResource, ImageContent

    from .errors import check_arguments

    fs: Any = SessionFileSystems(settings)
    mcp = FastMCP(SERVER_NAME, instructions=_instructions(fs))

    def call(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            result = fn(*args)
        except FileSystemError as exc:
            raise ToolError(sendable(bounded(str(exc)))) from None
        return sendable(result) if isinstance(result, str) else result

    def read_tool(title: str, description: str) -> Callable[[Callable[..., Any]], Any]:
        return mcp.tool(title=title, description=description, annotations=_READ, output_schema=None)

    text_description = (
        "Read the complete contents of a file from the file system as text (UTF-8). "
        "Use the 'head' parameter to read only the first N lines of a file, or the "
        "'tail' parameter to read only the last N lines (not both); files over "
        f"{settings.max_read_bytes} bytes can only be read with head or tail. "
        "Operates on the file as text regardless of extension. "
        "Only works within allowed directories."
    )

    @read_tool("Read Text File", text_description)
    def read_text_file(path: PathArg, head: HeadArg = None, tail: TailArg = None) -> str:
        return call(fs.read_text_file, path, head, tail)

    @read_tool(
        "Read File (Deprecated)",
        "Read the complete contents of a file as text. DEPRECATED: Use read_text_file instead.",
    )
    def read_file(path: PathArg, head: HeadArg = None, tail: TailArg = None) -> str:
        return call(fs.read_text_file, path, head, tail)

    @read_tool(
        "Read Media File",
        "Read an image or audio file. Returns the base64 encoded data and MIME type "
        "(other files come back as an embedded binary resource). "
        "Only works within allowed directories.",
    )
    def read_media_file(path: PathArg) -> list[Any]:
        kind, mime, data, real = call(fs.read_media_file, path)
        if kind == "image":
            return [ImageContent(type="image", data=data, mimeType=mime)]
        if kind == "audio":
            return [AudioContent(type="audio", data=data, mimeType=mime)]
        blob = BlobResourceContents(uri=real.as_uri(), mimeType=mime, blob=data)
        return [EmbeddedResource(type="resource", resource=blob)]

    @read_tool(
        "Read Multiple Files",
        "Read the contents of multiple files simultaneously. This is more efficient "
        "than reading files one by one when you need to analyze or compare multiple "
        "files. Each file's content is returned with its path as a reference. Failed "
        "reads for individual files won't stop the entire operation. "
        "Only works within allowed directories.",
    )
    def read_multiple_files(
        paths: Annotated[
            list[str],
            Field(
                min_length=1,
                description=(
                    "Array of file paths to read. Each path must be a string pointing "
                    "to a valid file within allowed directories."
                ),
            ),
        ],
    ) -> str:
        return call(fs.read_multiple_files, paths)

    @read_tool(
        "List Directory",
        "Get a detailed listing of all files and directories in a specified path. "
        "Results clearly distinguish between files and directories with [FILE] and "
        "[DIR] prefixes (a symlink is listed as [FILE]). "
        "Only works within allowed directories.",
    )
    def list_directory(path: PathArg) -> str:
        return call(fs.list_directory, path)

    @read_tool(
        "List Directory with Sizes",
        "Get a detailed listing of all files and directories in a specified path, "
        "including sizes, with [FILE] and [DIR] prefixes and totals at the end. "
        "Only works within allowed directories.",
    )
    def list_directory_with_sizes(
        path: PathArg,
        sortBy: Annotated[
            Literal["name", "size"],
            Field(description="Sort entries by name or size (largest first)"),
        ] = "name",
    ) -> str:
        return call(fs.list_directory_with_sizes, path, sortBy)

    @read_tool(
        "Directory Tree",
        "Get a recursive tree view of files and directories as a JSON structure. "
        "Each entry includes 'name', 'type' (file/directory), and 'children' for "
        "directories. Files have no children array, while directories always have a "
        "children array (which may be empty). Symlinks are listed as files and never "
        f"followed. Stops after {settings.max_entries} entries, and at "
        f"{MAX_TREE_DEPTH} levels deep, and says so. "
        "Only works within allowed directories.",
    )
    def directory_tree(path: PathArg, excludePatterns: TreeExcludeArg = []) -> str:  # noqa: B006
        return call(fs.directory_tree, path, excludePatterns)

    @read_tool(
        "Search Files",
        "Recursively search for files and directories matching a glob pattern. "
        "Patterns match paths relative to 'path': '*.ext' matches files directly in "
        "it, '**/*.ext' matches files in all subdirectories. Returns full paths to "
        "all matching items. Symlinked folders are not entered. "
        f"Stops after {settings.max_entries} entries and says so. "
        "Only searches within allowed directories.",
    )
    def search_files(
        path: PathArg,
        pattern: Annotated[
            str, Field(description="Glob pattern matched against paths relative to 'path'")
        ],
        excludePatterns: Annotated[
            list[str],
            Field(description="Glob patterns (relative to path) of entries to skip"),
        ] = [],  # noqa: B006
    ) -> str:
        return call(fs.search_files, path, pattern, excludePatterns)

    @read_tool(
        "Get File Info",
        "Retrieve detailed metadata about a file or directory: size, creation time, "
        "last modified time, last access time, permissions, and type. "
        "Only works within allowed directories.",
    )
    def get_file_info(path: PathArg) -> str:
        return call(fs.get_file_info, path)

    @read_tool(
        "List Allowed Directories",
        "Returns the list of directories that this server is allowed to access. "
        "Subdirectories within these allowed directories are also accessible.",
    )
    def list_allowed_directories() -> str:
        return call(fs.list_allowed_directories)

    if settings.read_only:
        check_arguments(mcp)
        return mcp

    @mcp.tool(
        title="Write File",
        description=(
            "Create a new file or completely overwrite an existing file with new content "
            "(written atomically; the parent folder must exist). Use with caution as it "
            "will overwrite existing files without warning. "
            "Only works within allowed directories."
        ),
        annotations=_writes(destructive=True, idempotent=True),
        output_schema=None,
    )
    def write_file(
        path: PathArg,
        content: Annotated[str, Field(description="The complete new content of the file")],
    ) -> str:
        return call(fs.write_file, path, content)

    @mcp.tool(
        title="Edit File",
        description=(
            "Make line-based edits to a text file. Each edit replaces the first exact "
            "match of oldText with newText, in order; if there is no exact match, a run "
            "of lines equal apart from surrounding whitespace is replaced, keeping its "
            "indentation. Line endings (LF or CRLF) are kept. Returns a git-style diff "
            "showing the changes made. Only works within allowed directories."
        ),
        annotations=_writes(destructive=True, idempotent=False),
        output_schema=None,
    )
    def edit_file(
        path: PathArg,
        edits: Annotated[
            list[EditOperation],
            Field(description="Replacements, applied in order; each must match"),
        ],
        dryRun: Annotated[
            bool, Field(description="Preview changes using git-style diff format")
        ] = False,
    ) -> str:
        pairs = [(edit.oldText, edit.newText) for edit in edits]
        return call(fs.edit_file, path, pairs, dryRun)

    @mcp.tool(
        title="Create Directory",
        description=(
            "Create a new directory or ensure a directory exists. Can create multiple "
            "nested directories in one operation. If the directory already exists, this "
            "operation will succeed silently. Only works within allowed directories."
        ),
        annotations=_writes(destructive=False, idempotent=True),
        output_schema=None,
    )
    def create_directory(path: PathArg) -> str:
        return call(fs.create_directory, path)

    @mcp.tool(
        title="Move File",
        description=(
            "Move or rename files and directories. Can move files between directories "
            "and rename them in a single operation. If the destination exists, the "
            "operation will fail. Both source and destination must be within allowed "
            "directories."
        ),
        annotations=_writes(destructive=False, idempotent=False),
        output_schema=None,
    )
    def move_file(
        source: Annotated[str, Field(description="The file or folder to move")],
        destination: Annotated[
            str, Field(description="Its new path; must not exist yet (its folder must)")
        ],
    ) -> str:
        return call(fs.move_file, source, destination)

    check_arguments(mcp)
    return mcp


def _instructions(systems: SessionFileSystems) -> str:
    verbs = "Read" if systems.settings.read_only else "Read, write"
    fixed = systems.fixed or systems.fallback
    if systems.fixed is not None:
        where = "these allowed directories only: " + ", ".join(map(str, fixed.jail.roots))  # type: ignore[union-attr]
    elif fixed is not None:
        where = (
            "the allowed directories only: the folders your client shares as MCP roots, "
            f"else {fixed.jail.roots[0]}"
        )
    else:
        where = (
            "the allowed directories only: the folders your client shares as MCP roots "
            "(none are allowed until it does)"
        )
    return (
        f"{verbs} and search files inside {where}. Call list_allowed_directories to see "
        "them. Relative paths are taken from the first one."
    )


def _roots_row(settings: Settings) -> str:
    source, roots, why = fixed_roots(settings)
    joined = ", ".join(str(root) for root in roots)
    if source == "setting":
        return f"{joined} (setting)"
    if source == "variable":
        return f"{joined} (variable ${ROOTS_ENV})"
    if source == "working directory":
        return f"the client's roots when it sends them, else the working directory {joined}"
    return f"none yet: the client's roots when it sends them ({why})"


def describe(settings: Settings) -> list[tuple[str, str]]:
    """Rows for ``dpt-launch --check``: where the roots come from, mode and limits."""
    return [
        ("roots", _roots_row(settings)),
        ("mode", "read-only" if settings.read_only else "read-write"),
        ("limits", f"read {settings.max_read_bytes} bytes, list {settings.max_entries} entries"),
    ]


def check(settings: Settings) -> list[tuple[str, str]]:
    """(level, message) problems for ``dpt-launch --check``: a WARN when no root is known yet."""
    source, _roots, why = fixed_roots(settings)
    if source != "none":
        return []
    return [
        (
            "WARN",
            f"no root yet; {why}; the client's roots will be used if it sends "
            f"them (or set 'roots' or ${ROOTS_ENV})",
        )
    ]


# -- lazy export and entry point -----------------------------------------------------


def __getattr__(name: str) -> Any:
    if name == "filesystem_server":
        server = workspace.watch_client_roots(create_server(Settings()))
        globals()[name] = server
        return server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> None:
    """Serve over stdio; roots from the arguments, else ``$DPTTOOLS_FS_ROOTS``, else the
    client's roots, else the working directory when it is a project folder."""
    import logging

    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = Settings(roots=args) if args else Settings()  # type: ignore[arg-type]
        server = workspace.watch_client_roots(create_server(settings))
    except ValueError as exc:
        print(f"filesystem: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    server.run(transport="stdio", show_banner=False)


if __name__ == "__main__":
    main()
