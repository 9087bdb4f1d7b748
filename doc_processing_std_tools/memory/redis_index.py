"""search_memory's entries of one Redis namespace, kept in memory as the folder store's index is
(see :mod:`.redis_store`): each call reads the token of the namespace's last change (one round
trip when nothing changed), else the versions hash, and fetches only the entries whose version
differs. Saved in the per-user cache as the folder's index is (:mod:`.index_file`), under the
store's identity and the data's epoch."""

from __future__ import annotations

import hashlib
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from . import redis_scripts as lua
from .formats import HEAD_BYTES, _decode_entry, _key_in_head
from .index import INDEX_BUDGET_CHARS, MAX_INDEXED_BYTES, _entry, _index_dir
from .index_entry import LARGE, NOT_UTF8, TEXT, IndexedEntry
from .index_file import decode_index, encode_index
from .index_saving import SavedLater
from .redis_connection import RedisMemory

# The meta fields read before every search: when all are unchanged, so is the namespace. ``gen``
# (the last change's token) tells any two states apart; epoch and seq are there for namespaces
# last changed by an older version, which wrote no gen.
GEN_FIELDS = ("epoch", "seq", "gen")
FETCH_BATCH = 1000  # entries fetched per script call when the index catches up
FETCH_PIPELINE = 10  # script calls per round trip
_SIG_MASK = (1 << 63) - 1  # an entry's sig is saved as signed 64-bit integers


def version_sig(version: bytes) -> int:
    """A file's version (hex digits: a change token, maybe with a suffix) as the integer kept in
    its index entry; a version written by something else is hashed."""
    try:
        return int(version, 16) & _SIG_MASK
    except ValueError:
        return zlib.crc32(version) | (1 << 62)


class RedisEntryIndex(SavedLater):
    """The key-value entries of one namespace, caught up with Redis at each search."""

    def __init__(self, db: RedisMemory) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._gen: tuple[Any, ...] | None = None  # GEN_FIELDS when the entries were caught up
        self._entries: dict[str, IndexedEntry] = {}
        self._kept = 0
        self._tried_saved = False

    @staticmethod
    def _is_entry(name: str) -> bool:
        return "/" not in name and name.endswith(".json") and not name.startswith(".")

    def entries(self) -> list[IndexedEntry]:
        """The key-value entries, caught up with Redis (see the module docstring)."""
        client = self.db.client()
        with self._lock:
            gen = tuple(client.hmget(self.db.k_meta, GEN_FIELDS))
            if gen == self._gen:
                return list(self._entries.values())
            if not self._entries and gen[0] is not None and not self._tried_saved:
                self._tried_saved = True
                self._entries = self._load_saved(gen[0])
                self._kept = sum(e.cost for e in self._entries.values())
            versions = client.hgetall(self.db.k_versions)
            wanted: dict[str, int] = {}
            for raw, version in versions.items():
                name = raw.decode("utf-8", "surrogateescape")
                if self._is_entry(name):
                    wanted[name] = version_sig(version)
            entries = self._entries
            for name in [n for n in entries if n not in wanted]:
                self._kept -= entries.pop(name).cost
            stale = [
                n
                for n, v in wanted.items()
                if n not in entries or entries[n].sig is None or entries[n].sig[0] != v  # type: ignore[index]
            ]
            for batch, reply in self._fetch(stale):
                for i, name in enumerate(batch):
                    size, data = int(reply[2 * i]), reply[2 * i + 1]
                    old = entries.pop(name, None)
                    if old is not None:
                        self._kept -= old.cost
                    if size < 0:
                        continue
                    entry = self._entry(name, wanted[name], size, data)
                    self._kept += entry.cost
                    entries[name] = entry
            self._gen = gen
            if stale or len(entries) != len(wanted):
                self._schedule_save()
            return list(entries.values())

    # -- the saved copy of the index (as the folder store's: memory/index_file.py) -------

    def _identity(self, epoch: bytes | None) -> tuple[tuple[int, int], Path]:
        """(the id written into the saved index, its file): the store (url without password,
        namespace) and the data's epoch, so another store's or an emptied Redis's never loads."""
        store = hashlib.sha256(f"{self.db.label}\0{self.db.namespace}".encode()).digest()
        data = hashlib.sha256(epoch or b"").digest()
        ids = (int.from_bytes(store[:8], "little") >> 1, int.from_bytes(data[:8], "little") >> 1)
        return ids, _index_dir() / f"redis-{store.hex()[:32]}.idx"

    def _load_saved(self, epoch: bytes) -> dict[str, IndexedEntry]:
        ids, path = self._identity(epoch)
        try:
            entries, _listing = decode_index(path.read_bytes(), ids)
        except (OSError, ValueError, IndexError, OverflowError):
            return {}
        return {e.name: e for e in entries}

    def _snapshot(self) -> tuple[list[IndexedEntry], bytes] | None:
        entries = list(self._entries.values())
        epoch = self._gen[0] if self._gen else None
        return (entries, epoch) if entries and epoch is not None else None

    def _saved(self, snapshot: tuple[list[IndexedEntry], bytes]) -> tuple[Path, bytes]:
        entries, epoch = snapshot
        ids, path = self._identity(epoch)
        return path, encode_index(entries, ids)

    def _fetch(self, names: list[str]) -> Iterator[tuple[list[str], list[Any]]]:
        """(names, FETCH reply) per batch; up to FETCH_PIPELINE batches per round trip, so
        Redis works on the next batches while the reply of the first is read."""
        script = self.db.script(lua.FETCH)
        step = FETCH_BATCH * FETCH_PIPELINE
        for start in range(0, len(names), step):
            batches = [
                names[i : i + FETCH_BATCH]
                for i in range(start, min(start + step, len(names)), FETCH_BATCH)
            ]
            yield from zip(batches, self._fetch_round(script, batches), strict=True)

    def _fetch_round(self, script: Any, batches: list[list[str]]) -> list[Any]:
        """FETCH of each batch in one pipeline. A cluster's pipeline does not load a script a
        node lacks (new or restarted node): then load it on every primary and read again."""
        for attempt in (1, 2):
            pipe = self.db.client().pipeline(transaction=False)
            for batch in batches:
                args = [n.encode("utf-8", "surrogateescape") for n in batch]
                script(keys=self.db.keys, args=[MAX_INDEXED_BYTES, HEAD_BYTES, *args], client=pipe)
            try:
                return list(pipe.execute())
            except redis.exceptions.NoScriptError:
                if not self.db.cluster or attempt == 2:
                    raise
                self.db.client().script_load(lua.FETCH)
        raise AssertionError("unreachable")

    def _entry(self, name: str, version: int, size: int, data: bytes) -> IndexedEntry:
        """The entry of *name* at *version* (its sig: (version_sig, size, 0, 0), saved as the
        folder index's (inode, size, mtime, ctime))."""
        stem, sig = name[:-5], (version, size, 0, 0)
        if size > MAX_INDEXED_BYTES:
            return _entry(name, sig, LARGE, _key_in_head(stem, data), size)
        key, value = _decode_entry(stem, data)
        if value is None:
            return _entry(name, sig, NOT_UTF8, key, size)
        keep = self._kept + 2 * len(value) <= INDEX_BUDGET_CHARS
        return _entry(name, sig, TEXT, key, size, value if keep else None)
