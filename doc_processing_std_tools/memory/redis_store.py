"""memory-tools on Redis or Valkey: the same tools and texts as the folder store, every change one Lua script.

A namespace is four hashes under one hash tag, ``dpt-memory:{<namespace>}:files|versions|dirs|meta``
(see :mod:`.redis_scripts`): a file's path maps to its bytes, exactly what the folder store would
keep in the file, so ``memory copy`` moves stores byte for byte. Edits (str_replace, insert) read
the file and its version, compute outside Redis and write only if the version is unchanged
(compare-and-set), else compute again. search_memory keeps the key-value entries in memory like the
folder's index: each call reads the token of the namespace's last change (one round trip when
nothing changed), else the versions hash, and fetches only the entries whose version differs.
Tokens and versions are random per change, never counters (see :mod:`.redis_scripts`), so a
restore from an older RDB or a failover to a lagging replica, followed by as many new changes as
were lost, still shows as a change of every entry it touched. The entries are saved in the per-user
cache as the folder's index is (:mod:`.index_file`), under the store's identity and the data's
epoch, and a new launcher checks each one against the versions hash before it trusts it.

Under a launcher with a fleet lock (``lock:``), every change script runs holding the process
lock and the fleet lock, for that script only, and checks the grant's fencing number in the same
script (:meth:`RedisMemoryStore._change`): a holder paused past its lease writes nothing.

Here: the tools. The connection and its errors: :mod:`.redis_connection`; the URL:
:mod:`.redis_urls`; search_memory's entries: :mod:`.redis_index`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .. import locking
from ..locking.fleet_lock import FleetLockLost
from ..shared.client_text import quote
from ..shared.reply_bounds import DEFAULT_BOUNDS, ReplyBounds
from . import redis_scripts as lua
from .files import FileCommands
from .formats import (
    HEAD_BYTES,
    MemoryStoreError,
    _decode_entry,
    _decode_text,
    _encode_entry,
    _human_size,
    _key_in_head,
    checked_path,
    file_view,
)
from .index_entry import IndexedEntry, matches
from .keys import KeyValueStore
from .redis_connection import RedisMemory
from .redis_index import RedisEntryIndex
from .replies import check_offset, folder_reply, keys_reply, search_reply

R = TypeVar("R")

NAME_MAX = 255  # bytes of one path component, as on the folder store's file systems
FOLDER_SIZE = 4096  # what memory_view shows for a folder (Redis keeps none; ext4's size)
EDIT_ATTEMPTS = 100  # compare-and-set rounds before an edit gives up (each lost to a newer write)


def _folder_parts(path: str, display: str) -> list[str]:
    """*path*'s components with ``..`` applied; refuses what climbs above the store."""
    out: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                raise MemoryStoreError(f"Path {display} would escape the memory directory")
            out.pop()
        else:
            out.append(part)
    return out


class RedisMemoryStore:
    """The memory tools (both interfaces) on one Redis namespace; same methods and texts as
    :class:`~.stores.MemoryStore`."""

    def __init__(self, redis_memory: RedisMemory, bounds: ReplyBounds = DEFAULT_BOUNDS) -> None:
        self.db = redis_memory
        self.bounds = bounds
        self.index = RedisEntryIndex(redis_memory)

    # -- paths ---------------------------------------------------------------------

    def _parse_path(self, path: str, action: str = "edit") -> tuple[str, str]:
        """(store path, display form): the folder store's checks (a name over NAME_MAX bytes
        is refused as the file system refuses it), then ``..`` applied."""
        if not isinstance(path, str):
            raise MemoryStoreError(f"The path must be a string, got {type(path).__name__}")
        if "\x00" in path:
            raise MemoryStoreError(
                f"Invalid path {quote(repr(path))}: paths cannot contain NUL bytes"
            )
        parts = [part for part in path.split("/") if part not in ("", ".")]
        display = checked_path(path, parts)
        resolved = "/".join(_folder_parts(path, display))
        try:
            resolved.encode("utf-8")
        except UnicodeEncodeError:
            raise MemoryStoreError(
                f"Cannot {action} {display}: the text is not valid Unicode"
            ) from None
        if any(len(part.encode("utf-8")) > NAME_MAX for part in parts):
            raise MemoryStoreError(f"Cannot {action} {display}: File name too long")
        return resolved, display

    @staticmethod
    def key_file_name(key: str) -> str:
        return KeyValueStore.key_file_name(key)

    def _not_a_folder(self, display: str) -> MemoryStoreError:
        return MemoryStoreError(
            f"The path {display} is not valid: one of its parent folders is a file"
        )

    def _has_file_parent(self, path: str) -> bool:
        parts = path.split("/")[:-1]
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if not prefixes:
            return False
        return any(self.db.client().hmget(self.db.k_files, prefixes))

    def _missing(self, path: str, display: str, text: str) -> MemoryStoreError:
        if self._has_file_parent(path):
            return self._not_a_folder(display)
        return MemoryStoreError(text)

    def _change(self, source: str, *args: Any) -> list[Any]:
        """Run the change script *source*. With a fleet lock in use (``lock:``), under the
        process lock and the fleet lock, held for this script only (the caller's, when the
        launcher holds them for the whole call), and fenced: a grant superseded before the
        script ran writes nothing, and the call answers that the lock was lost
        (:class:`~..locking.fleet_lock.FleetLockLost`, outcome ``lock_lost``)."""
        fleet = locking.fleet_lock_in_use()
        if fleet is None:
            with self.db.guard():
                return self.db.run(source, *args)
        reply: list[Any] = []
        try:
            with locking.exclusive(), self.db.guard():
                fence = locking.CURRENT_FENCE.get()
                fenced = None if fence is None else (fleet.fence_key, fence)
                reply = self.db.run(source, *args, fence=fenced)
        except FleetLockLost:
            if not reply or reply[0] != "lock_lost":
                raise  # written, but the lease ran out before the lock was given back
        if reply[0] == "lock_lost":
            raise FleetLockLost(fleet.superseded_text())
        return reply

    def _snapshot(self, path: str) -> tuple[bytes | None, bytes | None, bool]:
        """(bytes, version, is a folder) of *path*, read together."""
        data, version, is_dir = self.db.read_script(lua.SNAPSHOT, path)
        return data, version, bool(is_dir)

    # -- key-value tools -----------------------------------------------------------

    def write(self, key: str, value: str) -> str:
        name = self.key_file_name(key)
        if not isinstance(value, str):
            raise MemoryStoreError(f"The value must be a string, got {type(value).__name__}")
        data = _encode_entry(key, value)
        display = "/" + name
        status, *rest = self._change(lua.WRITE, name, data, HEAD_BYTES)
        if status == "isdir":
            raise MemoryStoreError(
                f"Cannot store key {key!r}: {display} is a folder, not a memory file"
            )
        if status == "new":
            return f"Memory {key!r} saved."
        previous = _key_in_head(name[:-5], rest[0])
        if previous != key:
            return f"Memory {key!r} saved, replacing the value of {previous!r} (same file {name})."
        return f"Memory {key!r} saved (the previous value was replaced)."

    def read(self, key: str) -> str:
        name = self.key_file_name(key)
        with self.db.guard():
            data, _version, is_dir = self._snapshot(name)
        if data is None:
            if is_dir:
                raise MemoryStoreError(f"The path /{name} is a directory, not a file")
            raise MemoryStoreError(
                f"No memory stored under key {key!r}. Use list_memory_keys to see the keys."
            )
        value = _decode_entry(name[:-5], data)[1]
        if value is None:
            raise MemoryStoreError(
                f"The memory file {name} for key {key!r} is not UTF-8 text and cannot be read"
            )
        return value

    def delete(self, key: str) -> str:
        name = self.key_file_name(key)
        (status,) = self._change(lua.DELETE_FILE, name)
        if status == "isdir":
            raise MemoryStoreError(f"The path /{name} is a directory, not a file")
        if status == "missing":
            raise MemoryStoreError(f"No memory stored under key {key!r}")
        return f"Memory {key!r} deleted."

    def search(self, query: str, offset: int = 0) -> str:
        if not isinstance(query, str):
            raise MemoryStoreError(f"The query must be a string, got {type(query).__name__}")
        check_offset(offset)
        needle = query.casefold()
        with self.db.guard():
            results = matches(self.index.entries(), needle, self._stored_value)
        return search_reply(results, offset, self.bounds)

    def _stored_value(self, entry: IndexedEntry) -> str | None:
        """The text value of an entry the index did not keep (over its budget)."""
        data = self.db.client().hget(self.db.k_files, entry.name)
        return None if data is None else _decode_entry(entry.name[:-5], data)[1]

    def list_keys(self, offset: int = 0) -> str:
        check_offset(offset)
        with self.db.guard():
            entries = self.index.entries()
        return keys_reply(sorted(entry.key for entry in entries), offset, self.bounds)

    def warm_index(self) -> None:
        """Fetch the entries in the background when served (errors wait for the first call)."""
        try:
            with self.db.guard():
                self.index.entries()
        except MemoryStoreError:
            pass

    # -- file tools ----------------------------------------------------------------

    def view(self, path: str, view_range: list[int] | None = None) -> str:
        target, display = self._parse_path(path, "view")
        with self.db.guard():
            if target == "":
                is_dir, data = True, None
            else:
                data, _version, is_dir = self._snapshot(target)
            if data is None and not is_dir:
                raise self._missing(
                    target,
                    display,
                    f"The path {display} does not exist. Please provide a valid path.",
                )
            if data is None:
                if view_range is not None:
                    raise MemoryStoreError(
                        f"The `view_range` parameter is not allowed when {display} is a directory"
                    )
                return self._view_dir(target, display)
        return file_view(data, display, view_range)

    def _view_dir(self, target: str, display: str) -> str:
        prefix = target + "/" if target else ""
        flat = self.db.read_script(lua.LISTING, prefix.encode("utf-8"), 2)
        children: dict[str, list[tuple[str, int]]] = {}
        for i in range(0, len(flat), 2):
            rel = flat[i].decode("utf-8", "surrogateescape")[len(prefix) :]
            parent, _, name = rel.rpartition("/")
            children.setdefault(parent, []).append((name, int(flat[i + 1])))
        shown = display.rstrip("/")
        rows = [f"{_human_size(FOLDER_SIZE)}\t{display}"]

        def walk(rel: str) -> None:  # depth first, sorted by name, as the folder's walk
            for name, size in sorted(children.get(rel, [])):
                path = f"{rel}/{name}" if rel else name
                if size < 0:
                    rows.append(f"{_human_size(FOLDER_SIZE)}\t{shown}/{path}/")
                    walk(path)
                else:
                    rows.append(f"{_human_size(size)}\t{shown}/{path}")

        walk("")
        header = (
            f"Here're the files and directories up to 2 levels deep in {display}, "
            "excluding hidden items:"
        )
        return folder_reply(header, rows, self.bounds)

    def create(self, path: str, file_text: str) -> str:
        target, display = self._parse_path(path, "create")
        if not target:
            if not [p for p in path.split("/") if p not in ("", ".")]:
                raise MemoryStoreError("The path / is the memory directory; give a file path")
            raise MemoryStoreError(f"File {display} already exists")
        try:
            data = file_text.encode("utf-8")
        except UnicodeEncodeError:
            raise MemoryStoreError(
                f"Cannot write {display}: the text is not valid Unicode"
            ) from None
        except AttributeError:
            raise MemoryStoreError(
                f"The file_text must be a string, got {type(file_text).__name__}"
            ) from None
        (status,) = self._change(lua.CREATE, target, data)
        if status == "exists":
            raise MemoryStoreError(f"File {display} already exists")
        if status == "notdir":
            raise self._not_a_folder(display)
        return f"File created successfully at: {display}"

    def _edit(self, target: str, display: str, change: Callable[[str], tuple[str, R]]) -> R:
        """Apply *change* (old text -> (new text, result)) if the file is still the version it
        was computed from; else compute again from the newer text."""
        for attempt in range(EDIT_ATTEMPTS):
            with self.db.guard():
                data, version, is_dir = self._snapshot(target) if target else (None, None, True)
                if data is None:
                    if is_dir:
                        raise MemoryStoreError(f"The path {display} is not a file.")
                    raise self._missing(
                        target,
                        display,
                        f"The path {display} does not exist. Please provide a valid path.",
                    )
            new_text, result = change(_decode_text(data, display))
            try:
                new_data = new_text.encode("utf-8")
            except UnicodeEncodeError:
                raise MemoryStoreError(
                    f"Cannot write {display}: the text is not valid Unicode"
                ) from None
            (status,) = self._change(lua.REPLACE_IF, target, version or b"", new_data)
            if status == "ok":
                return result
            if status == "missing":
                continue  # deleted meanwhile: the next read says so
            time.sleep(random.uniform(0, 0.001 * min(attempt, 20)))
        raise MemoryStoreError(
            f"Cannot edit {display}: it changed {EDIT_ATTEMPTS} times while the edit was "
            "computed; try again"
        )

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        return FileCommands.str_replace(self, path, old_str, new_str)  # type: ignore[arg-type]

    def insert(self, path: str, insert_line: int, insert_text: str) -> str:
        return FileCommands.insert(self, path, insert_line, insert_text)  # type: ignore[arg-type]

    def delete_path(self, path: str) -> str:
        target, display = self._parse_path(path, "delete")
        if not target:
            raise MemoryStoreError("Cannot delete the memory directory itself")
        (status,) = self._change(lua.DELETE_PATH, target)
        if status == "notdir":
            raise self._not_a_folder(display)
        if status == "missing":
            raise MemoryStoreError(f"The path {display} does not exist")
        return f"Successfully deleted {display}"

    def rename(self, old_path: str, new_path: str) -> str:
        old, old_display = self._parse_path(old_path, "rename")
        new, new_display = self._parse_path(new_path, "rename to")
        if not old:
            raise MemoryStoreError("Cannot rename the memory directory itself")
        if not new:
            raise MemoryStoreError(f"The destination {new_display} already exists")
        (status,) = self._change(lua.RENAME, old, new)
        if status == "missing":
            raise MemoryStoreError(f"The path {old_display} does not exist")
        if status == "notdir-old":
            raise self._not_a_folder(old_display)
        if status == "exists":
            raise MemoryStoreError(f"The destination {new_display} already exists")
        if status == "into":
            raise MemoryStoreError(f"Cannot move {old_display} into itself ({new_display})")
        if status == "notdir":
            raise self._not_a_folder(new_display)
        return f"Successfully renamed {old_display} to {new_display}"
