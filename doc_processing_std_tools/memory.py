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

import atexit
import errno
import gc
import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypeVar

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator

from . import locking, workspace
from .containment import TEMP_PREFIX, ContainmentError, Jail, remove_if_stale
from .settings import ServerSettings, resolve_path
from .text import QUOTE_LIMIT, bounded, quote, sendable

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
SWEEP_DELAY = 3.0  # seconds from the first call to the sweep of dead writers' temp files
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


def _edited(header: str, snippet: str) -> str:
    """A success reply: *header* and the snippet, the snippet cut to QUOTE_LIMIT characters
    (a 2 MB insert is not sent back whole; memory_view shows the rest)."""
    if len(snippet) > QUOTE_LIMIT:
        rest = snippet.count("\n", QUOTE_LIMIT)
        snippet = (
            f"{snippet[:QUOTE_LIMIT]}… (the snippet goes on for {len(snippet) - QUOTE_LIMIT:,} "
            f"more characters and {rest:,} more lines: use memory_view with a view_range)"
        )
    return f"{header} Here is the snippet showing the change (with line numbers):\n{snippet}"


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


def _encode_entry(key: str, value: str) -> bytes:
    """``_encode_json({"key": key, "value": value})``, byte for byte, in one pass over the
    value (json.dumps with an indent takes its slower pure-Python path)."""
    from json.encoder import encode_basestring, encode_basestring_ascii

    try:
        text = (
            f'{{\n  "key": {encode_basestring(key)},\n  "value": {encode_basestring(value)}\n}}\n'
        )
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them as \\u escapes
        text = (
            f'{{\n  "key": {encode_basestring_ascii(key)},\n'
            f'  "value": {encode_basestring_ascii(value)}\n}}\n'
        )
        return text.encode("ascii")


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


# -- the key-value entries' index -------------------------------------------------


MAX_INDEXED_BYTES = 1 << 20  # entries above are listed by key and matched by key only
INDEX_BUDGET_CHARS = 32 << 20  # characters of values (and folded values) kept in memory
# A file changed less than this before it was read may change again within the same
# timestamp tick, unseen by stat: it is read again until it is older (cf. git's "racy clean").
RACY_NS = 2_000_000_000
INDEX_SAVE_DELAY = 2.0  # seconds from a change seen by a scan to the index's save
INDEX_MAGIC = b"DPT-MEMORY-INDEX 4\n"

TEXT, NOT_UTF8, LARGE, UNREADABLE = range(4)  # kinds of entries
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_SAVED_INTS = 6  # per saved entry: inode, size, mtime_ns, ctime_ns, kind, has a value


class IndexedEntry(NamedTuple):
    """What the index knows of one ``<key>.json`` entry (a tuple: thousands are made at once)."""

    name: str  # the file name
    # (inode, size, mtime_ns, ctime_ns) proving the content unchanged; None when nothing
    # can (a file changed just before it was read, a symlink, an unreadable file)
    sig: tuple[int, int, int, int] | None
    kind: int  # TEXT, NOT_UTF8, LARGE or UNREADABLE
    key: str
    size: int  # bytes, when read
    value: str | None  # a TEXT entry's value; None when not kept (over the budget)
    folded_key: str
    folded_value: str | None  # value.casefold(), the same object when equal

    def without_value(self) -> IndexedEntry:
        return self._replace(value=None, folded_value=None)

    @property
    def cost(self) -> int:
        """Characters kept in memory for the value."""
        if self.value is None:
            return 0
        return len(self.value) * (1 if self.folded_value is self.value else 2)


def _entry(
    name: str,
    sig: tuple[int, int, int, int] | None,
    kind: int,
    key: str,
    size: int,
    value: str | None = None,
) -> IndexedEntry:
    folded = None
    if value is not None:
        folded = value.casefold()
        if folded == value:
            folded = value  # one string, not two
    return IndexedEntry(name, sig, kind, key, size, value, key.casefold(), folded)


def _index_dir() -> Path:
    """Where saved indexes live: the per-user cache folder (never the memory folder)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir(workspace.APP_NAME)) / "memory-index"


def _entry_from_fd(name: str, fd: int, now_ns: int, keep: bool) -> IndexedEntry | None:
    """Read the entry open as *fd* (None when it is not a regular file any more)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return None
    stem = name[: -len(".json")]
    sig: tuple[int, int, int, int] | None = None
    if now_ns - info.st_ctime_ns > RACY_NS:
        sig = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    if info.st_size > MAX_INDEXED_BYTES:
        key = _key_in_head(stem, os.read(fd, HEAD_BYTES))
        return _entry(name, sig, LARGE, key, info.st_size)
    chunks = []
    size = 0
    while chunk := os.read(fd, max(info.st_size + 1 - size, 1 << 16)):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_INDEXED_BYTES:  # it grew while we read: next time it is seen as large
            key = _key_in_head(stem, b"".join(chunks)[:HEAD_BYTES])
            return _entry(name, None, LARGE, key, size)
    key, value = _decode_entry(stem, b"".join(chunks))
    if value is None:
        return _entry(name, sig, NOT_UTF8, key, size)
    return _entry(name, sig, TEXT, key, size, value if keep else None)


def _unreadable(name: str) -> IndexedEntry:
    """Present but unreadable (permissions, swapped for a symlink): listed, never matched."""
    return _entry(name, None, UNREADABLE, name[: -len(".json")], 0)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a scan makes (and keeps) 100,000s of tuples:
    the collector would walk them all again and again, doubling the time of a cold scan."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class EntryIndex:
    """The key-value entries of one memory folder, kept between calls and checked on each.

    Each call lists the folder (skipped while the folder's own stat is unchanged) and stats
    every entry: one whose (inode, size, mtime, ctime) is unchanged is taken from memory,
    any other is read again. So changes made behind the server's back (another launcher, an
    editor) are always seen. Files changed within :data:`RACY_NS` before they were read are
    read again on every call until they are older, so a rewrite within one timestamp tick
    cannot hide. Values are kept up to :data:`INDEX_BUDGET_CHARS` in all (others are read
    again when searched); entries over :data:`MAX_INDEXED_BYTES` are never loaded whole.

    The index is saved (in the per-user cache folder, a few seconds after a change) so that
    the first search of a new process does not read every file: it still stats them all.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()  # guards the fields below; held for no disk work
        self._by_name: dict[str, IndexedEntry] | None = None  # None: not loaded yet
        self._trusted = 0  # how many of them have a sig (those are saved)
        self._listing: tuple[tuple[int, int, int], list[str]] | None = None
        self._save_pending = False

    # -- scanning -------------------------------------------------------------------

    def entries(self, jail: Jail) -> list[IndexedEntry]:
        """Every entry, sorted by file name, checked against the disk now."""
        with _gc_paused(), jail.open_folder(str(jail.roots[0])) as (fd, _folder):
            known, known_trusted = self._by_name, self._trusted
            if known is None:
                known = self._load(fd)
                known_trusted = len(known)
            names = self._names(fd)
            fresh: dict[str, IndexedEntry] = {}
            reused = newly_trusted = 0
            now_ns = time.time_ns()
            budget = INDEX_BUDGET_CHARS
            lstat, is_reg, get = os.stat, stat.S_ISREG, known.get
            for name in names:
                try:
                    info = lstat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                entry = get(name)
                if (
                    entry is None
                    or entry.sig != (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
                    or not is_reg(info.st_mode)
                ):
                    if is_reg(info.st_mode):
                        entry = self._read(fd, name, now_ns, budget > 0)
                    elif stat.S_ISLNK(info.st_mode):
                        entry = self._read_link(jail, name, now_ns)
                    else:
                        continue  # a folder or a special file: not an entry
                    if entry is None:
                        continue
                    newly_trusted += entry.sig is not None
                else:
                    reused += 1
                if entry.value is not None:
                    if budget <= 0:  # over the budget: read again when searched
                        entry = entry.without_value()
                    budget -= entry.cost
                fresh[name] = entry
        with self._lock:
            self._by_name, self._trusted = fresh, reused + newly_trusted
            # What would be saved changed (racy files and symlinks read again are not saved).
            if newly_trusted or reused != known_trusted:
                self._schedule_save()
        return list(fresh.values())

    def _names(self, fd: int) -> list[str]:
        """The entry names (sorted), from memory while the folder's own stat is unchanged."""
        info = os.fstat(fd)
        sig = (info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
        listing = self._listing
        if listing is not None and listing[0] == sig:
            return listing[1]
        now_ns = time.time_ns()
        names = []
        for name in os.listdir(fd):
            if name[0] == ".":
                if name.startswith(TEMP_PREFIX):
                    remove_if_stale(fd, name)  # a dead writer's litter
            elif name.endswith(".json"):
                names.append(name)
        names.sort()
        self._listing = (sig, names) if now_ns - info.st_ctime_ns > RACY_NS else None
        return names

    @staticmethod
    def _read(fd: int, name: str, now_ns: int, keep: bool) -> IndexedEntry | None:
        try:
            file_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            return None  # removed while we scanned
        except OSError:
            return _unreadable(name)
        try:
            return _entry_from_fd(name, file_fd, now_ns, keep)
        except OSError:
            return _unreadable(name)
        finally:
            os.close(file_fd)

    @staticmethod
    def _read_link(jail: Jail, name: str, now_ns: int) -> IndexedEntry | None:
        """A symlinked entry, followed only while it stays inside (read every time: changes
        of its target do not show in the link's own stat)."""
        try:
            with jail.open_file(f"{jail.roots[0]}/{name}") as (handle, _real):
                entry = _entry_from_fd(name, handle.fileno(), now_ns, True)
        except (OSError, ValueError):  # escaping or broken symlink, a folder...
            return None
        return entry._replace(sig=None) if entry is not None else None

    @staticmethod
    def value_of(jail: Jail, entry: IndexedEntry) -> str | None:
        """The value of a TEXT entry, read again when it was not kept (over the budget)."""
        if entry.value is not None or entry.kind != TEXT:
            return entry.value
        again = None
        with (
            suppress(OSError, ValueError),
            jail.open_file(f"{jail.roots[0]}/{entry.name}") as (handle, _real),
        ):
            again = _entry_from_fd(entry.name, handle.fileno(), 0, True)
        return again.value if again is not None else None

    # -- the saved copy -------------------------------------------------------------

    def _path(self) -> Path:
        import hashlib

        real = os.path.realpath(self.folder)
        return _index_dir() / f"{hashlib.sha256(os.fsencode(real)).hexdigest()[:32]}.idx"

    def _load(self, fd: int) -> dict[str, IndexedEntry]:
        """The saved index of this folder (empty when missing, foreign or damaged)."""
        try:
            data = self._path().read_bytes()
            info = os.fstat(fd)
            entries, listing = decode_index(data, (info.st_dev, info.st_ino))
            if self._listing is None:
                self._listing = listing
            return dict(zip([e.name for e in entries], entries, strict=True))
        except (OSError, ValueError, IndexError, OverflowError):
            return {}

    def _schedule_save(self) -> None:
        """Save a few seconds from now, or at exit (one pending save at a time). Caller
        holds _lock."""
        if self._save_pending:
            return
        self._save_pending = True
        _UNSAVED.add(self)
        timer = threading.Timer(INDEX_SAVE_DELAY, self.save)
        timer.daemon = True
        timer.start()

    def save(self) -> None:
        """Write the saved copy now (atomically; a failure only costs the next process time)."""
        with self._lock:
            self._save_pending = False
            _UNSAVED.discard(self)
            entries = list((self._by_name or {}).values())
            listing = self._listing
        try:
            info = os.stat(self.folder)
            data = encode_index(entries, (info.st_dev, info.st_ino), listing)
            path = self._path()
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            temp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            temp.write_bytes(data)
            os.replace(temp, path)  # no fsync: a cache, checked entry by entry when loaded
        except OSError:
            pass


_UNSAVED: set[EntryIndex] = set()  # indexes with a save pending


@atexit.register
def _save_at_exit() -> None:
    for index in list(_UNSAVED):
        index.save()


Listing = tuple[tuple[int, int, int], list[str]]  # the folder's (inode, mtime, ctime), names


def encode_index(
    entries: list[IndexedEntry], folder_id: tuple[int, int], listing: Listing | None = None
) -> bytes:
    """The entries with a sig (and the folder's listing), as: magic, header ints, 6 ints per
    entry, four text blobs.

    The blobs hold the names, the keys, the values and the listing's names, each joined by
    NUL (which no file name or key holds; entries whose value holds one are left out).
    Native byte order: a per-user cache, read back by the same machine.
    """
    from array import array

    saved = [
        e
        for e in entries
        if e.sig is not None and e.kind != UNREADABLE and not (e.value and "\0" in e.value)
    ]
    ints = array("q")
    for entry in saved:
        ints.extend(entry.sig)  # type: ignore[arg-type]
        ints.extend((entry.kind, entry.value is not None))
    blobs = [
        "\0".join(texts).encode("utf-8", "surrogatepass")
        for texts in (
            [e.name for e in saved],
            [e.key for e in saved],
            [e.value or "" for e in saved],
            listing[1] if listing else [],
        )
    ]
    folder_sig = listing[0] if listing else (-1, -1, -1)
    header = array("q", [*folder_id, *folder_sig, len(saved), *(len(blob) for blob in blobs)])
    return b"".join([INDEX_MAGIC, header.tobytes(), ints.tobytes(), *blobs])


def decode_index(
    data: bytes, folder_id: tuple[int, int]
) -> tuple[list[IndexedEntry], Listing | None]:
    """The entries and listing of :func:`encode_index`'s bytes; ValueError when foreign or
    damaged."""
    from array import array

    if not data.startswith(INDEX_MAGIC):
        raise ValueError("not an index")
    pos = len(INDEX_MAGIC)
    header = array("q", data[pos : pos + 80])
    pos += 80
    if len(header) != 10 or (header[0], header[1]) != folder_id:
        raise ValueError("another folder's index")
    folder_sig = (header[2], header[3], header[4])
    count, *sizes = header[5:]
    if count < 1 or min(sizes) < 0 or pos + 8 * _SAVED_INTS * count + sum(sizes) != len(data):
        raise ValueError("an empty or damaged index")
    ints = array("q", data[pos : pos + 8 * _SAVED_INTS * count])
    pos += len(ints) * 8
    texts = []
    for size in sizes:
        texts.append(data[pos : pos + size].decode("utf-8", "surrogatepass"))
        pos += size
    names, keys, values = (text.split("\0") for text in texts[:3])
    listing = (folder_sig, texts[3].split("\0") if texts[3] else []) if folder_sig[0] >= 0 else None
    folded_keys, folded_values = texts[1].casefold().split("\0"), texts[2].casefold().split("\0")
    if not len(names) == len(keys) == len(values) == len(folded_values) == count:
        raise ValueError("a damaged index")
    kinds, has_value = ints[4::_SAVED_INTS], ints[5::_SAVED_INTS]
    if not set(kinds) <= {TEXT, NOT_UTF8, LARGE}:
        raise ValueError("a damaged index")
    sigs = zip(*(ints[i::_SAVED_INTS] for i in range(4)), strict=True)
    kept = [v if has else None for v, has in zip(values, has_value, strict=True)]
    # A folded value equal to its value is the same object (half the memory).
    folded = [
        None if v is None else (v if f == v else f)
        for v, f in zip(kept, folded_values, strict=True)
    ]
    sizes_column = ints[1::_SAVED_INTS]
    rows = zip(names, sigs, kinds, keys, sizes_column, kept, folded_keys, folded, strict=True)
    return list(map(tuple.__new__, repeat(IndexedEntry), rows)), listing


# -- folder trees, iteratively ----------------------------------------------------

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


class MemoryStore:
    """The memory tools' logic, without MCP: methods return the result text and
    raise :class:`MemoryStoreError` with the message for the user."""

    def __init__(self, memory_dir: str | os.PathLike[str]) -> None:
        self.memory_dir = Path(memory_dir)
        self._swept = False  # stale temp files are removed on first use
        self.index = EntryIndex(self.memory_dir)

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
            # A crash's litter, removed a moment after the first call rather than before it
            # (listings hide it meanwhile, and remove what they meet).
            sweep = threading.Timer(SWEEP_DELAY, self._sweep, args=(jail,))
            sweep.daemon = True
            sweep.start()
        return jail

    @staticmethod
    def _sweep(jail: Jail) -> None:
        with suppress(OSError), jail.open_folder(str(jail.roots[0])) as (fd, _folder):
            sweep_tree(fd)

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

    def write(self, key: str, value: str) -> str:
        name = self.key_file_name(key)
        if not isinstance(value, str):
            raise MemoryStoreError(f"The value must be a string, got {type(value).__name__}")
        data = _encode_entry(key, value)
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

    def _indexed(self) -> tuple[Jail, list[IndexedEntry]]:
        jail = self._jail()
        with self._guard("/", "list"):
            return jail, self.index.entries(jail)

    def search(self, query: str) -> str:
        if not isinstance(query, str):
            raise MemoryStoreError(f"The query must be a string, got {type(query).__name__}")
        needle = query.casefold()
        jail, entries = self._indexed()
        results: list[dict[str, Any]] = []
        for entry in entries:
            if entry.kind == TEXT:
                value, folded = entry.value, entry.folded_value
                if value is None or folded is None:  # not kept in memory: read it now
                    value = self.index.value_of(jail, entry)
                    if value is None:
                        continue
                    folded = value.casefold() if needle not in entry.folded_key else ""
                if needle in entry.folded_key or needle in folded:
                    results.append({"key": entry.key, "value": value})
            elif entry.kind == LARGE and needle in entry.folded_key:
                results.append({"key": entry.key, "value": None, "size": entry.size})
        results.sort(key=lambda item: item["key"])
        return json.dumps(results, ensure_ascii=False)

    def list_keys(self) -> str:
        _jail, entries = self._indexed()
        return json.dumps(sorted(entry.key for entry in entries), ensure_ascii=False)

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
            return new_content, _edited("The memory file has been edited.", snippet)

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
            return "\n".join(result) + "\n", _edited(
                f"The file {display} has been edited.", snippet
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
                with jail.resolve(target, follow_last=False) as found:
                    info = found.lstat()
                    if found.name is None or info is None:
                        raise FileNotFoundError(errno.ENOENT, "No such file or directory")
                    if stat.S_ISDIR(info.st_mode):
                        remove_tree(found.parent_fd, found.name)  # at any depth
                    else:
                        os.unlink(found.name, dir_fd=found.parent_fd)
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
        """Find memories whose key or value contains the query, ignoring case. Returns a JSON list of {"key": ..., "value": ...} objects sorted by key, with full values (an empty list when nothing matches); an entry over 1 MiB is matched by its key only and listed with "value": null and its "size" in bytes (read it with read_memory)."""
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
