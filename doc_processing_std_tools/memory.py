"""``memory-tools``: agent memory in one folder, through two interfaces.

* **Key-value tools** (``write_memory``, ``read_memory``, ``search_memory``,
  ``list_memory_keys``, ``delete_memory``): each key is stored as ``<key>.json``
  at the top of the memory directory, holding ``{"key": ..., "value": ...}``.
* **File tools** modelled on Anthropic's memory tool (``memory_view``,
  ``memory_create``, ``memory_str_replace``, ``memory_insert``, ``memory_delete``,
  ``memory_rename``): paths are relative to the memory directory, ``/`` is the
  directory itself.

Both work on the same folder, so a ``notes.json`` made with ``memory_create``
is also the key ``notes``. Decisions where the two meet:

* Every top-level, non-hidden ``*.json`` regular file (or symlink resolving
  inside the folder) is an entry. When its content is our ``{"key", "value"}``
  shape (both strings) and the stored key flattens to the file name, that key
  and value are used. Otherwise the file name stem is the key and the file's
  raw text is the value. A file that is not UTF-8 is listed by its stem,
  skipped by search, and ``read_memory`` explains it cannot be read.
* Keys become flat file names: ``/`` and ``\\`` turn into ``_`` (``a/b`` and
  ``a_b`` are the same key). Empty keys, NUL, keys starting with ``.`` (hidden
  files, including ``.`` and ``..``) and names over 200 bytes are refused.
* Names starting with ``.dpt`` (the lock file ``.dpt.lock`` and the temp files
  ``.dpt-tmp-*``) are reserved: file tools refuse them, listings hide them with
  every other hidden item.

Every path goes through :class:`~doc_processing_std_tools.containment.Jail`;
every change runs under :func:`~doc_processing_std_tools.locking.exclusive`
with the store's lock file, and every write is atomic.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator

from . import locking, workspace
from .containment import ContainmentError, Jail
from .settings import ServerSettings, resolve_path
from .text import bounded, quote, sendable

if TYPE_CHECKING:
    from fastmcp import FastMCP

R = TypeVar("R")

SERVER_NAME = "memory-tools"
# Every state-changing tool takes locking.exclusive() itself (process lock + flock),
# so the launcher must not hold the (non-re-entrant) process lock around them.
LOCKS_ITSELF = True
ENV_MEMORY_DIR = "DPTTOOLS_MEMORY_DIR"
DEFAULT_MEMORY_DIR = "./agent_memory"

MAX_KEY_FILE_BYTES = 200  # the key's file name, ".json" included, in UTF-8
MAX_LINES = 999_999
LINE_NUMBER_WIDTH = 6
RESERVED_PREFIX = ".dpt"  # ".dpt.lock" and ".dpt-tmp-*"
MAX_PATH_CHARS = 4096  # PATH_MAX: longer paths would only make very deep folder chains
MAX_LISTED_OCCURRENCES = 20  # lines named when memory_str_replace finds old_str many times
HEAD_BYTES = 4096  # read of an entry's start that names its key (keys are <= 200 bytes)
EDIT_ATTEMPTS = 3  # optimistic edits before one runs wholly under the locks

# RESERVED_PREFIX covers locking.LOCK_FILE_NAME and containment.TEMP_PREFIX.


# -- settings -------------------------------------------------------------------


MEMORY_FOLDER_NAME = "agent_memory"
# Where the memory folder came from (Settings.source).
FROM_SETTING = "setting"
FROM_VARIABLE = "variable"
FROM_CWD = "working directory"
FROM_USER_DATA = "client's first root, else per-user data folder"


def user_memory_dir() -> Path:
    """``<per-user data folder>/agent_memory``, used when the working directory is no project."""
    return workspace.user_data_dir() / MEMORY_FOLDER_NAME


def _default_memory_dir() -> Path:
    """$DPTTOOLS_MEMORY_DIR, else ./agent_memory when the working directory is a writable
    project folder, else the per-user folder (a client root may replace it per session)."""
    raw = os.environ.get(ENV_MEMORY_DIR)
    if raw:
        return resolve_path(raw, None)  # against the working directory, when first built
    cwd = Path(os.getcwd())
    candidate = resolve_path(DEFAULT_MEMORY_DIR, None)
    if workspace.unsuitable_reason(cwd) is None and workspace.writable_reason(candidate) is None:
        return candidate
    return user_memory_dir()


class Settings(ServerSettings):
    """Settings of the ``memory-tools`` server."""

    memory_dir: Path = Field(
        default_factory=_default_memory_dir,
        description=(
            f"Folder holding the memories (created on first use). Default: ${ENV_MEMORY_DIR}, "
            f"else {DEFAULT_MEMORY_DIR}; relative paths resolve against the config file's folder."
        ),
    )

    _source: str = PrivateAttr(default=FROM_SETTING)

    def model_post_init(self, context: Any, /) -> None:
        if "memory_dir" in self.model_fields_set:
            self._source = FROM_SETTING
        elif os.environ.get(ENV_MEMORY_DIR):
            self._source = FROM_VARIABLE
        elif self.memory_dir == user_memory_dir():
            self._source = FROM_USER_DATA
        else:
            self._source = FROM_CWD

    @property
    def source(self) -> str:
        """Where memory_dir came from: setting, variable, working directory, or (when
        FROM_USER_DATA) the client's first root per session, else the per-user folder."""
        return self._source

    @property
    def follows_client_roots(self) -> bool:
        return self._source == FROM_USER_DATA

    @field_validator("memory_dir", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("memory_dir must not be empty")
        return value

    @field_validator("memory_dir")
    @classmethod
    def _resolve(cls, value: Path, info: ValidationInfo) -> Path:
        path = resolve_path(value, info)
        if path.exists() and not path.is_dir():
            raise ValueError(f"{path} exists and is not a folder")
        return path


def describe(settings: Settings) -> list[tuple[str, str]]:
    """(label, value) rows for ``dpt-launch --check`` (no fastmcp import, nothing created)."""
    path = settings.memory_dir
    state = "exists" if path.is_dir() else "created on first use"
    if settings.follows_client_roots:
        where = (
            f"<client's first root>/{MEMORY_FOLDER_NAME} when the client sends roots, "
            f"else {path} ({state})"
        )
    else:
        where = f"{path} ({state})"
    return [("memory_dir", where), ("memory from", settings.source)]


def check(settings: Settings) -> list[tuple[str, str]]:
    """(level, message) problems for ``dpt-launch --check`` and start-up (nothing created)."""
    why = workspace.writable_reason(settings.memory_dir)
    if why is None:
        return []
    return [("FAIL", f"memory-tools: the memory folder {why}; {_fix()}")]


def _fix() -> str:
    return f"set ${ENV_MEMORY_DIR} or the memory_dir setting to a writable folder"


# -- the store ------------------------------------------------------------------


class MemoryStoreError(Exception):
    """A refused or failed operation; the message is meant for the user."""


def _flatten_key(key: str) -> str:
    return key.replace("/", "_").replace("\\", "_")


def _split_lines(content: str) -> list[str]:
    """Split on LF (a CR stays), without the empty tail after a final newline."""
    if not content:
        return []
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _numbered(lines: list[str], start: int, end: int) -> str:
    """Lines[start:end] numbered from start + 1, right-aligned to 6 columns, then a tab."""
    return "\n".join(f"{i + 1:>{LINE_NUMBER_WIDTH}}\t{lines[i]}" for i in range(start, end))


def _snippet(lines: list[str], first: int, last: int) -> str:
    """The changed lines [first, last] (0-based) with two lines of context each side."""
    return _numbered(lines, max(0, first - 2), min(len(lines), last + 3))


def _snippet_at(content: str, first: int, last: int) -> str:
    """Like :func:`_snippet` on ``_split_lines(content)``, without splitting the whole text."""
    start_line = max(0, first - 2)
    start = 0
    for _ in range(start_line):  # at most first - 2 finds, each resuming where the last stopped
        start = content.find("\n", start) + 1
    lines = []
    pos = start
    while len(lines) < last + 3 - start_line and pos < len(content):
        end = content.find("\n", pos)
        if end == -1:
            lines.append(content[pos:])
            break
        lines.append(content[pos:end])
        pos = end + 1
    return "\n".join(
        f"{start_line + i + 1:>{LINE_NUMBER_WIDTH}}\t{line}" for i, line in enumerate(lines)
    )


def _multiple_occurrences(content: str, old_str: str, pos: int) -> str:
    """The refusal for an old_str found more than once: its lines, at most
    MAX_LISTED_OCCURRENCES of them (linear in the text, whatever the count)."""
    lines: list[int] = []
    line, counted = 1, 0
    while pos != -1 and len(lines) < MAX_LISTED_OCCURRENCES:
        line += content.count("\n", counted, pos)
        counted = pos
        lines.append(line)
        pos = content.find(old_str, pos + 1)
    listed = ", ".join(map(str, lines))
    if pos == -1:
        return (
            f"No replacement was performed. Multiple occurrences of old_str `{quote(old_str)}` "
            f"in lines: {listed}. Please ensure it is unique"
        )
    total = content.count(old_str)
    return (
        f"No replacement was performed. old_str `{quote(old_str)}` occurs {total:,} times; "
        f"the first {len(lines)} are in lines: {listed}. Please ensure it is unique"
    )


def _decode_text(data: bytes, display: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise MemoryStoreError(
            f"The file {display} is not UTF-8 text and cannot be shown or edited"
        ) from None


def _encode_text(text: str, display: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise MemoryStoreError(f"Cannot write {display}: the text is not valid Unicode") from None


def _human_size(size: int) -> str:
    units = ("B", "K", "M", "G")
    index = min((size.bit_length() - 1) // 10, len(units) - 1) if size > 0 else 0
    scaled = size / 1024**index
    if scaled == int(scaled):
        return f"{int(scaled)}{units[index]}"
    return f"{scaled:.1f}{units[index]}"


def _encode_json(obj: Any) -> bytes:
    try:
        return (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them as \\u escapes
        return (json.dumps(obj, indent=2) + "\n").encode("ascii")


def _decode_entry(stem: str, data: bytes) -> tuple[str, str | None]:
    """(key, value) of a top-level .json file; value None when it is not UTF-8 text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return stem, None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return stem, text
    if (
        isinstance(obj, dict)
        and isinstance(obj.get("key"), str)
        and isinstance(obj.get("value"), str)
    ):
        # The file name is authoritative: a stored key that no longer matches it
        # (the file was renamed) is reported under the file's name.
        key = obj["key"] if _flatten_key(obj["key"]) == stem else stem
        return key, obj["value"]
    return stem, text


# Our own layout, ``{"key": "...", "value": "...``, as _encode_json writes it.
_KEY_HEAD = re.compile(rb'\A\s*\{\s*"key"\s*:\s*("(?:[^"\\\x00-\x1f]|\\.)*")\s*,\s*"value"\s*:\s*"')


def _key_in_head(stem: str, head: bytes) -> str:
    """The key named in the first bytes of an entry written by write_memory, else the stem.

    For entries too large to decode whole: the key comes first, so the head names it.
    """
    match = _KEY_HEAD.match(head)
    if match is None:
        return stem
    try:
        key = json.loads(match.group(1))
    except ValueError:
        return stem
    return key if isinstance(key, str) and _flatten_key(key) == stem else stem


def _is_entry_name(name: str) -> bool:
    """Top-level ``<key>.json`` files are key-value entries; hidden ones never are."""
    return name.endswith(".json") and not name.startswith(".")


class MemoryStore:
    """The memory tools' logic, without MCP: methods return the result text and
    raise :class:`MemoryStoreError` with the message for the user."""

    def __init__(self, memory_dir: str | os.PathLike[str]) -> None:
        self.memory_dir = Path(memory_dir)
        self._swept = False  # stale temp files are removed on first use

    # -- plumbing -------------------------------------------------------------

    def _jail(self) -> Jail:
        """A jail on the memory directory, creating the directory if it is missing."""
        try:
            os.makedirs(self.memory_dir, mode=0o700, exist_ok=True)
            jail = Jail([self.memory_dir])
        except (FileExistsError, NotADirectoryError):
            raise MemoryStoreError(
                f"The memory directory {self.memory_dir} is not a folder"
            ) from None
        except OSError as exc:
            raise MemoryStoreError(
                f"Cannot use the memory directory {self.memory_dir}: {exc.strerror or exc}"
            ) from None
        if not self._swept:
            self._swept = True
            with suppress(OSError):  # a crash's litter; listings hide what is left anyway
                jail.sweep(str(jail.roots[0]), recursive=True)
        return jail

    @contextmanager
    def _locked(self) -> Iterator[Jail]:
        """Hold the process lock and the store's file lock for a check-and-change."""
        jail = self._jail()
        with ExitStack() as stack:
            try:
                stack.enter_context(locking.exclusive(folders=[jail.roots[0]]))
            except OSError as exc:
                raise MemoryStoreError(f"Cannot lock the memory directory: {exc}") from None
            yield jail

    def _own_paths(self) -> list[list[str]]:
        """The memory directory's absolute path as components, as given and resolved."""
        given = os.path.abspath(self.memory_dir)
        spellings = [given, os.path.realpath(given)]
        return [[p for p in spelling.split("/") if p] for spelling in dict.fromkeys(spellings)]

    @staticmethod
    def _abs(jail: Jail, parts: list[str]) -> str:
        """The jail path of *parts* below the root (absolute, so ``~`` is never expanded)."""
        return "/".join([str(jail.roots[0]), *parts]) if parts else str(jail.roots[0])

    def _parse_path(self, path: str) -> tuple[list[str], str]:
        """(components, display form) of a memory path; refuses NUL and reserved names.

        The memory directory's own absolute path, written at the start, names the
        directory itself, so ``<memory_dir>/../x`` is refused as an escape instead
        of being created as ``<memory_dir>/<memory_dir path>/x``.
        """
        if not isinstance(path, str):
            raise MemoryStoreError(f"The path must be a string, got {type(path).__name__}")
        if "\x00" in path:
            raise MemoryStoreError(
                f"Invalid path {quote(repr(path))}: paths cannot contain NUL bytes"
            )
        parts = [part for part in path.split("/") if part not in ("", ".")]
        if path.startswith("/"):
            for own in self._own_paths():
                if parts[: len(own)] == own:
                    parts = parts[len(own) :]
                    break
        display = quote("/" + "/".join(parts))
        if len(path) > MAX_PATH_CHARS:
            raise MemoryStoreError(
                f"The path {display} is {len(path):,} characters long; the limit is "
                f"{MAX_PATH_CHARS:,}"
            )
        for part in parts:
            if part.startswith(RESERVED_PREFIX):
                raise MemoryStoreError(
                    f"The path {display} uses the reserved name {part!r}: names starting with "
                    f"{RESERVED_PREFIX!r} belong to the memory server"
                )
        return parts, display

    @contextmanager
    def _guard(
        self, display: str, action: str = "access", missing: str | None = None
    ) -> Iterator[None]:
        """Turn OS and containment errors into user-facing messages (*missing*: for ENOENT)."""
        try:
            yield
        except MemoryStoreError:
            raise
        except ContainmentError as exc:
            suffix = " via symlink" if exc.via_symlink else ""
            raise MemoryStoreError(
                f"Path {display} would escape the memory directory{suffix}"
            ) from None
        except FileNotFoundError:
            raise MemoryStoreError(
                missing or f"The path {display} does not exist. Please provide a valid path."
            ) from None
        except NotADirectoryError:
            raise MemoryStoreError(
                f"The path {display} is not valid: one of its parent folders is a file"
            ) from None
        except IsADirectoryError:
            raise MemoryStoreError(f"The path {display} is a directory, not a file") from None
        except UnicodeError:
            raise MemoryStoreError(
                f"Cannot {action} {display}: the text is not valid Unicode"
            ) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise MemoryStoreError(
                    f"The path {display} has too many levels of symbolic links"
                ) from None
            raise MemoryStoreError(f"Cannot {action} {display}: {exc.strerror or exc}") from None
        except ValueError as exc:  # e.g. a name the OS cannot encode
            raise MemoryStoreError(f"Cannot {action} {display}: {exc}") from None

    # -- key-value interface --------------------------------------------------

    @staticmethod
    def key_file_name(key: str) -> str:
        """The file name a key is stored under, or MemoryStoreError if it cannot be one."""
        if not isinstance(key, str):
            raise MemoryStoreError(f"The key must be a string, got {type(key).__name__}")
        if key == "":
            raise MemoryStoreError("The key must not be empty")
        if "\x00" in key:
            raise MemoryStoreError(f"Invalid key {quote(repr(key))}: keys cannot contain NUL bytes")
        flat = _flatten_key(key)
        if flat in (".", "..") or flat.startswith("."):
            raise MemoryStoreError(
                f"Invalid key {quote(repr(key))}: keys cannot start with '.' (the file would be hidden)"
            )
        name = flat + ".json"
        try:
            size = len(name.encode("utf-8"))
        except UnicodeEncodeError:
            raise MemoryStoreError(
                f"Invalid key {quote(repr(key))}: it is not valid Unicode"
            ) from None
        if size > MAX_KEY_FILE_BYTES:
            raise MemoryStoreError(
                f"Invalid key: its file name {name[:40]!r}... is {size} bytes in UTF-8; the "
                f"limit is {MAX_KEY_FILE_BYTES} bytes including the '.json' suffix"
            )
        return name

    def _entries(self, jail: Jail) -> Iterator[tuple[str, str | None]]:
        """(key, value) of every top-level entry, sorted by file name; never raises on content."""
        root = self._abs(jail, [])
        with self._guard("/", "list"):
            scan = list(jail.scan_files(root, select=_is_entry_name))
        for entry, data in scan:
            stem = entry.name[: -len(".json")]
            if data is None:
                if entry.kind == "file":  # present but unreadable: listed, never matched
                    yield stem, None
                if entry.kind != "symlink":
                    continue
                try:  # a symlink is followed only while it stays inside the folder
                    data = jail.read_bytes(self._abs(jail, [entry.name]))
                except (OSError, ValueError):  # escaping or broken symlink, a folder...
                    continue
            yield _decode_entry(stem, data)

    def write(self, key: str, value: str) -> str:
        name = self.key_file_name(key)
        if not isinstance(value, str):
            raise MemoryStoreError(f"The value must be a string, got {type(value).__name__}")
        data = _encode_json({"key": key, "value": value})
        display = "/" + name
        with self._locked() as jail, self._guard(display, "write"):
            path = self._abs(jail, [name])
            previous: str | None = None
            existed = False
            try:  # only the head: the previous key is named there, the value may be huge
                with jail.open_file(path) as (handle, _real):
                    existed = True
                    previous = _key_in_head(name[:-5], handle.read(HEAD_BYTES))
            except FileNotFoundError:
                pass
            except IsADirectoryError:
                raise MemoryStoreError(
                    f"Cannot store key {key!r}: {display} is a folder, not a memory file"
                ) from None
            except ContainmentError:
                raise
            except OSError:
                existed = True  # unreadable but present: it is replaced
            jail.write_atomic(path, data)
        if not existed:
            return f"Memory {key!r} saved."
        if previous is not None and previous != key:
            return f"Memory {key!r} saved, replacing the value of {previous!r} (same file {name})."
        return f"Memory {key!r} saved (the previous value was replaced)."

    def read(self, key: str) -> str:
        name = self.key_file_name(key)
        jail = self._jail()
        display = "/" + name
        missing = f"No memory stored under key {key!r}. Use list_memory_keys to see the keys."
        with self._guard(display, "read", missing):
            data = jail.read_bytes(self._abs(jail, [name]))
        value = _decode_entry(name[:-5], data)[1]
        if value is None:
            raise MemoryStoreError(
                f"The memory file {name} for key {key!r} is not UTF-8 text and cannot be read"
            )
        return value

    def search(self, query: str) -> str:
        if not isinstance(query, str):
            raise MemoryStoreError(f"The query must be a string, got {type(query).__name__}")
        needle = query.casefold()
        results = [
            {"key": key, "value": value}
            for key, value in self._entries(self._jail())
            if value is not None and (needle in key.casefold() or needle in value.casefold())
        ]
        results.sort(key=lambda item: item["key"])
        return json.dumps(results, ensure_ascii=False)

    def list_keys(self) -> str:
        return json.dumps(sorted(key for key, _ in self._entries(self._jail())), ensure_ascii=False)

    def delete(self, key: str) -> str:
        name = self.key_file_name(key)
        display = "/" + name
        missing = f"No memory stored under key {key!r}"
        with self._locked() as jail, self._guard(display, "delete", missing):
            jail.remove(self._abs(jail, [name]))
        return f"Memory {key!r} deleted."

    # -- file interface (Anthropic's memory tool) --------------------------------

    def view(self, path: str, view_range: list[int] | None = None) -> str:
        parts, display = self._parse_path(path)
        jail = self._jail()
        target = self._abs(jail, parts)
        with self._guard(display, "view"):
            info = jail.lstat(target)
            if stat.S_ISDIR(info.st_mode):
                if view_range is not None:
                    raise MemoryStoreError(
                        f"The `view_range` parameter is not allowed when {display} is a directory"
                    )
                return self._view_dir(jail, target, display, info)
        if not stat.S_ISREG(info.st_mode):
            raise MemoryStoreError(f"Unsupported file type for {display}")
        with self._guard(display, "read"):
            data = jail.read_bytes(target)
        lines = _split_lines(_decode_text(data, display))
        if len(lines) > MAX_LINES:
            raise MemoryStoreError(
                f"File {display} exceeds maximum line limit of {MAX_LINES:,} lines."
            )
        start, end = 0, len(lines)
        if view_range is not None:
            if len(view_range) != 2:
                raise MemoryStoreError(
                    f"Invalid `view_range` parameter: {quote(view_range)}. It should be a list of two "
                    "integers [start, end] (1-based; end -1 means to the end of the file)."
                )
            first, last = view_range
            if first < 1 or first > max(len(lines), 1):
                raise MemoryStoreError(
                    f"Invalid `view_range` parameter: {quote(view_range)}. Its first element `{first}` "
                    f"should be within the range of lines of the file: [1, {len(lines)}]."
                )
            if last != -1 and last < first:
                raise MemoryStoreError(
                    f"Invalid `view_range` parameter: {quote(view_range)}. Its second element `{last}` "
                    f"should be -1 (to the end) or at least the first element `{first}`."
                )
            start = first - 1
            end = len(lines) if last == -1 else min(last, len(lines))
        header = f"Here's the content of {display} with line numbers:"
        body = _numbered(lines, start, end)
        return f"{header}\n{body}" if body else header

    def _view_dir(self, jail: Jail, target: str, display: str, info: os.stat_result) -> str:
        base = jail.realpath(target)
        prefix = display.rstrip("/")
        rows = [f"{_human_size(info.st_size)}\t{display}"]
        hidden = lambda entry: entry.name.startswith(".")  # noqa: E731
        for _depth, entry in jail.walk(target, max_depth=2, exclude=hidden):
            rel = entry.path.relative_to(base)
            kind, size = entry.kind, entry.size
            if kind == "symlink":  # shown as what it points to, when that is inside
                try:
                    linked = jail.lstat(str(entry.path))
                except (OSError, ValueError):
                    continue
                kind = "dir" if stat.S_ISDIR(linked.st_mode) else "file"
                if not (stat.S_ISDIR(linked.st_mode) or stat.S_ISREG(linked.st_mode)):
                    continue
                size = linked.st_size
            if kind == "dir":
                rows.append(f"{_human_size(size)}\t{prefix}/{rel.as_posix()}/")
            elif kind == "file":
                rows.append(f"{_human_size(size)}\t{prefix}/{rel.as_posix()}")
        header = (
            f"Here're the files and directories up to 2 levels deep in {display}, "
            "excluding hidden items:"
        )
        return header + "\n" + "\n".join(rows)

    def create(self, path: str, file_text: str) -> str:
        parts, display = self._parse_path(path)
        if not parts:
            raise MemoryStoreError("The path / is the memory directory; give a file path")
        try:
            data = file_text.encode("utf-8")
        except UnicodeEncodeError:
            raise MemoryStoreError(
                f"Cannot write {display}: the text is not valid Unicode"
            ) from None
        with self._locked() as jail, self._guard(display, "create"):
            try:
                jail.write_atomic(self._abs(jail, parts), data, create_parents=True, exclusive=True)
            except FileExistsError:
                raise MemoryStoreError(f"File {display} already exists") from None
        return f"File created successfully at: {display}"

    def _file_bytes(self, jail: Jail, parts: list[str], display: str) -> bytes:
        """The bytes of the regular file at *parts* (refusing folders and other types)."""
        target = self._abs(jail, parts)
        with self._guard(display, "edit"):
            info = jail.lstat(target)
            if not stat.S_ISREG(info.st_mode):
                raise MemoryStoreError(f"The path {display} is not a file.")
            return jail.read_bytes(target)

    def _edit(self, parts: list[str], display: str, change: Callable[[str], tuple[str, R]]) -> R:
        """Apply *change* (old text -> (new text, result)) to a file, holding the locks only to write.

        The read, the search and the new content are computed before the locks are taken
        (so a slow or refused edit never makes other writers wait); under the locks the
        file is read again and written only if its bytes are still those *change* saw.
        When another writer keeps changing it, the last attempt runs wholly under the locks.
        """
        for attempt in range(EDIT_ATTEMPTS):
            optimistic = attempt < EDIT_ATTEMPTS - 1
            if optimistic:
                before = self._file_bytes(self._jail(), parts, display)
                new_text, result = change(_decode_text(before, display))
                data = _encode_text(new_text, display)
            with self._locked() as jail:
                current = self._file_bytes(jail, parts, display)
                if not optimistic:
                    new_text, result = change(_decode_text(current, display))
                    data = _encode_text(new_text, display)
                elif current != before:
                    continue  # changed since it was read: compute again from the new text
                with self._guard(display, "write"):
                    jail.write_atomic(self._abs(jail, parts), data)
                return result
        raise AssertionError("unreachable: the last attempt returns or raises")

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        parts, display = self._parse_path(path)
        if old_str == "":
            raise MemoryStoreError("No replacement was performed: old_str must not be empty.")

        def change(content: str) -> tuple[str, str]:
            pos = content.find(old_str)
            if pos == -1:
                raise MemoryStoreError(
                    f"No replacement was performed, old_str `{quote(old_str)}` did not appear "
                    f"verbatim in {display}."
                )
            if content.find(old_str, pos + 1) != -1:
                raise MemoryStoreError(_multiple_occurrences(content, old_str, pos))
            new_content = content[:pos] + new_str + content[pos + len(old_str) :]
            first = content.count("\n", 0, pos)
            snippet = _snippet_at(new_content, first, first + new_str.count("\n"))
            return new_content, (
                "The memory file has been edited. Here is the snippet showing the change "
                "(with line numbers):\n" + snippet
            )

        return self._edit(parts, display, change)

    def insert(self, path: str, insert_line: int, insert_text: str) -> str:
        parts, display = self._parse_path(path)

        def change(content: str) -> tuple[str, str]:
            lines = _split_lines(content)
            if insert_line < 0 or insert_line > len(lines):
                raise MemoryStoreError(
                    f"Invalid `insert_line` parameter: {quote(insert_line)}. It should be within "
                    f"the range [0, {len(lines)}]."
                )
            text = insert_text[:-1] if insert_text.endswith("\n") else insert_text
            new_lines = text.split("\n")
            result = [*lines[:insert_line], *new_lines, *lines[insert_line:]]
            snippet = _snippet(result, insert_line, insert_line + len(new_lines) - 1)
            return "\n".join(result) + "\n", (
                f"The file {display} has been edited. Here is the snippet showing the change "
                "(with line numbers):\n" + snippet
            )

        return self._edit(parts, display, change)

    def delete_path(self, path: str) -> str:
        parts, display = self._parse_path(path)
        refuse = MemoryStoreError("Cannot delete the memory directory itself")
        if not parts:
            raise refuse
        with self._locked() as jail:
            target = self._abs(jail, parts)
            with self._guard(display, "delete", f"The path {display} does not exist"):
                if jail.realpath(target) == jail.roots[0]:
                    raise refuse
                jail.remove(target, recursive=True)
        return f"Successfully deleted {display}"

    def rename(self, old_path: str, new_path: str) -> str:
        old_parts, old_display = self._parse_path(old_path)
        new_parts, new_display = self._parse_path(new_path)
        if not old_parts:
            raise MemoryStoreError("Cannot rename the memory directory itself")
        with self._locked() as jail:
            source = self._abs(jail, old_parts)
            destination = self._abs(jail, new_parts)
            with self._guard(old_display, "rename"):
                if jail.realpath(source) == jail.roots[0]:
                    raise MemoryStoreError("Cannot rename the memory directory itself")
                with jail.resolve(source, follow_last=False) as found:
                    if found.lstat() is None:
                        raise MemoryStoreError(f"The path {old_display} does not exist")
            with self._guard(new_display, "rename to"):
                try:
                    with jail.resolve(destination, follow_last=False) as found:
                        if found.is_root or found.lstat() is not None:
                            raise MemoryStoreError(f"The destination {new_display} already exists")
                except FileNotFoundError:
                    pass  # a missing parent folder is created below
                try:
                    jail.rename(source, destination, create_parents=True)
                except FileExistsError:
                    raise MemoryStoreError(
                        f"The destination {new_display} already exists"
                    ) from None
                except OSError as exc:
                    if exc.errno == errno.EINVAL:
                        raise MemoryStoreError(
                            f"Cannot move {old_display} into itself ({new_display})"
                        ) from None
                    raise
        return f"Successfully renamed {old_display} to {new_display}"


class SessionStores:
    """The :class:`MemoryStore` for the tool call running now.

    A memory folder from the setting, the variable or the working directory is used
    for every call. Otherwise each session uses ``<its client's first root>/agent_memory``
    when the client sends roots, else the per-user folder. Store methods are looked
    up per call: ``stores.write(...)``.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.default = MemoryStore(settings.memory_dir)
        self._stores: dict[Path, MemoryStore] = {}
        self._lock = threading.Lock()

    def current(self) -> MemoryStore:
        if not self.settings.follows_client_roots:
            return self.default
        try:
            roots = workspace.current_client_roots()
        except workspace.ClientRootsError as exc:
            raise MemoryStoreError(str(exc)) from None
        if not roots:
            return self.default
        folder = roots[0] / MEMORY_FOLDER_NAME
        why = workspace.writable_reason(folder)
        if why is not None:
            raise MemoryStoreError(
                f"The memory folder (agent_memory in the client's first root) {why}; {_fix()}"
            )
        with self._lock:
            store = self._stores.get(folder)
            if store is None:
                store = self._stores[folder] = MemoryStore(folder)
        return store

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def method(*args: Any) -> Any:
            return getattr(self.current(), name)(*args)

        return method


def instructions(settings: Settings) -> str:
    """The server instructions, ending with where the memory lives."""
    if settings.follows_client_roots:
        where = (
            f"The memory folder is {MEMORY_FOLDER_NAME} in the first folder your client shares "
            f"as an MCP root, else {settings.memory_dir}."
        )
    else:
        where = f"The memory folder is {settings.memory_dir}."
    return f"{INSTRUCTIONS}\n{where}"


# -- the MCP server -------------------------------------------------------------

INSTRUCTIONS = """\
Persistent memory kept in one folder, with two interfaces on the same files.
Key-value tools (write_memory, read_memory, search_memory, list_memory_keys,
delete_memory) store each key as <key>.json at the top of the folder ("/" and
"\\" in keys become "_"). File tools (memory_view, memory_create,
memory_str_replace, memory_insert, memory_delete, memory_rename) work like
Anthropic's memory tool on paths relative to the folder ("/" is the folder
itself); a top-level .json file made with them also appears as a key.
Start with memory_view("/") or list_memory_keys to see what is remembered."""


Key = Annotated[
    str,
    Field(
        description='The memory key, e.g. "user_preferences". "/" and "\\" become "_"; '
        'it cannot be empty or start with ".".'
    ),
]
MemPath = Annotated[
    str,
    Field(
        description='Path relative to the memory directory, e.g. "notes/todo.md"; '
        '"/" is the directory itself (a leading "/" is ignored).'
    ),
]


def _annotations(*, read_only: bool, destructive: bool, idempotent: bool) -> Any:
    from mcp.types import ToolAnnotations

    return ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


def create_server(settings: Settings | None = None) -> FastMCP:
    """Build a fresh ``memory-tools`` server on ``settings.memory_dir``."""
    from fastmcp import FastMCP
    from fastmcp.exceptions import ToolError

    from .errors import check_arguments

    settings = settings if settings is not None else Settings()
    store: Any = SessionStores(settings)
    server = FastMCP(SERVER_NAME, instructions=instructions(settings))

    READ = _annotations(read_only=True, destructive=False, idempotent=True)

    def run(method: Any, *args: Any) -> str:
        try:
            return sendable(method(*args))
        except MemoryStoreError as exc:
            raise ToolError(sendable(bounded(str(exc)))) from None

    @server.tool(
        output_schema=None,
        annotations=_annotations(read_only=False, destructive=True, idempotent=True),
    )
    def write_memory(
        key: Key,
        value: Annotated[str, Field(description="The text to remember (any length).")],
    ) -> str:
        """Store a text value under a key, replacing any value the key already had. The value is saved as <key>.json in the memory directory (created if missing) and survives restarts; returns a confirmation."""
        return run(store.write, key, value)

    @server.tool(output_schema=None, annotations=READ)
    def read_memory(key: Key) -> str:
        """Return the full text stored under a key, or an error if no memory has that key. For a .json file that was not written by write_memory, its raw text is returned."""
        return run(store.read, key)

    @server.tool(output_schema=None, annotations=READ)
    def search_memory(
        query: Annotated[
            str,
            Field(
                description="Text to look for in keys and values (case-insensitive; "
                "an empty query matches every memory)."
            ),
        ],
    ) -> str:
        """Find memories whose key or value contains the query, ignoring case. Returns a JSON list of {"key": ..., "value": ...} objects sorted by key, with full values (an empty list when nothing matches)."""
        return run(store.search, query)

    @server.tool(output_schema=None, annotations=READ)
    def list_memory_keys() -> str:
        """List every stored key as a sorted JSON list of strings. Every top-level .json file in the memory directory counts, including ones made with memory_create (listed under their file name without .json)."""
        return run(store.list_keys)

    @server.tool(
        output_schema=None,
        annotations=_annotations(read_only=False, destructive=True, idempotent=True),
    )
    def delete_memory(key: Key) -> str:
        """Delete the memory stored under a key (its <key>.json file). Returns a confirmation, or an error if no memory has that key."""
        return run(store.delete, key)

    @server.tool(output_schema=None, annotations=READ)
    def memory_view(
        path: MemPath,
        view_range: Annotated[
            list[int] | None,
            Field(
                description="Optional [start, end] line range for a file, 1-based and "
                "inclusive; end -1 means to the end of the file."
            ),
        ] = None,
    ) -> str:
        """Show a directory or a file of the memory directory. A directory lists its files and folders up to 2 levels deep with their sizes (hidden items excluded); a file is shown with line numbers, optionally only the lines in view_range."""
        return run(store.view, path, view_range)

    @server.tool(
        output_schema=None,
        annotations=_annotations(read_only=False, destructive=False, idempotent=True),
    )
    def memory_create(
        path: MemPath,
        file_text: Annotated[str, Field(description="The full content of the new file.")],
    ) -> str:
        """Create a new file in the memory directory with the given content, creating missing parent folders. It never overwrites: it fails if the file already exists (edit it with memory_str_replace or memory_insert, or delete it first)."""
        return run(store.create, path, file_text)

    @server.tool(
        output_schema=None,
        annotations=_annotations(read_only=False, destructive=True, idempotent=False),
    )
    def memory_str_replace(
        path: MemPath,
        old_str: Annotated[
            str,
            Field(description="The exact text to replace; it must occur exactly once in the file."),
        ],
        new_str: Annotated[
            str, Field(description="The replacement text (may be empty to delete old_str).")
        ],
    ) -> str:
        """Replace one exact occurrence of old_str with new_str in a memory file. Nothing changes if old_str is missing or occurs more than once (the error names the lines); on success the edited lines are shown with line numbers."""
        return run(store.str_replace, path, old_str, new_str)

    @server.tool(
        output_schema=None,
        annotations=_annotations(read_only=False, destructive=False, idempotent=False),
    )
    def memory_insert(
        path: MemPath,
        insert_line: Annotated[
            int,
            Field(
                description="0-based line to insert before: 0 inserts at the top, the file's "
                "line count appends at the end."
            ),
        ],
        insert_text: Annotated[str, Field(description="The text to insert (one or more lines).")],
    ) -> str:
        """Insert text into a memory file before the given 0-based line, keeping every existing line. Returns the edited lines with line numbers, or an error giving the valid range of insert_line."""
        return run(store.insert, path, insert_line, insert_text)

    @server.tool(
        output_schema=None,
        annotations=_annotations(read_only=False, destructive=True, idempotent=True),
    )
    def memory_delete(
        path: Annotated[
            str,
            Field(
                description="Path of the file or folder to delete, relative to the memory "
                "directory; the directory itself cannot be deleted."
            ),
        ],
    ) -> str:
        """Delete a file, or a folder with everything in it, from the memory directory. A symlink is removed itself, never what it points to; the memory directory itself cannot be deleted, nor a path or symlink resolving to it."""
        return run(store.delete_path, path)

    @server.tool(
        output_schema=None,
        annotations=_annotations(read_only=False, destructive=True, idempotent=True),
    )
    def memory_rename(
        old_path: Annotated[
            str,
            Field(
                description="Current path of the file or folder, relative to the memory directory."
            ),
        ],
        new_path: Annotated[
            str,
            Field(
                description="New path, relative to the memory directory; it must not exist "
                "yet (missing parent folders are created)."
            ),
        ],
    ) -> str:
        """Rename or move a file or folder inside the memory directory. It fails if the destination already exists or the source does not; missing parent folders of the destination are created."""
        return run(store.rename, old_path, new_path)

    check_arguments(server)
    return server


_server_lock = threading.Lock()


def __getattr__(name: str) -> Any:
    if name == "memory_server":
        with _server_lock:
            server = globals().get("memory_server")
            if server is None:
                server = workspace.watch_client_roots(create_server())
                globals()["memory_server"] = server
        return server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    import logging
    import sys

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    memory_server = workspace.watch_client_roots(create_server())
    memory_server.run(show_banner=False)
