"""The key-value tools over ``<key>.json`` entries: write, read, search, list and delete."""

from __future__ import annotations

import os
from contextlib import suppress
from typing import TYPE_CHECKING

from ..containment import ContainmentError, Jail
from ..shared.client_text import quote

if TYPE_CHECKING:
    pass
from .folder import MemoryFolder
from .formats import (
    HEAD_BYTES,
    MAX_KEY_FILE_BYTES,
    MemoryStoreError,
    _decode_entry,
    _encode_entry,
    _flatten_key,
    _key_in_head,
)
from .index_entry import IndexedEntry, matches
from .replies import check_offset, keys_reply, search_reply


class KeyValueStore(MemoryFolder):
    """The key-value tools (write/read/search/list/delete_memory) over ``<key>.json`` entries."""

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

    def warm_index(self) -> None:
        """Read the saved index; when none was saved, scan the folder. Run in the background
        when the server is served, so an agent's first search only checks what is there
        instead of reading every entry. A folder that does not exist yet is not made for it."""
        self.index.preload()
        if self.index.loaded or not os.path.isdir(self.memory_dir):
            return
        with suppress(MemoryStoreError, OSError):
            self._indexed()

    def _indexed(self) -> tuple[Jail, list[IndexedEntry]]:
        jail = self._jail()
        with self._guard("/", "list"):
            return jail, self.index.entries(jail)

    def search(self, query: str, offset: int = 0) -> str:
        if not isinstance(query, str):
            raise MemoryStoreError(f"The query must be a string, got {type(query).__name__}")
        check_offset(offset)
        needle = query.casefold()
        jail, entries = self._indexed()
        results = matches(entries, needle, lambda entry: self.index.value_of(jail, entry))
        return search_reply(results, offset, self.bounds)

    def list_keys(self, offset: int = 0) -> str:
        check_offset(offset)
        _jail, entries = self._indexed()
        return keys_reply(sorted(entry.key for entry in entries), offset, self.bounds)

    def delete(self, key: str) -> str:
        name = self.key_file_name(key)
        display = "/" + name
        missing = f"No memory stored under key {key!r}"
        with self._locked() as jail, self._guard(display, "delete", missing):
            jail.remove(self._abs(jail, [name]))
        return f"Memory {key!r} deleted."
