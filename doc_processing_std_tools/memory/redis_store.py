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
"""

from __future__ import annotations

import atexit
import hashlib
import os
import random
import secrets
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

from ..shared.client_text import quote
from ..shared.reply_bounds import DEFAULT_BOUNDS, ReplyBounds
from . import redis_scripts as lua
from .formats import (
    HEAD_BYTES,
    MAX_KEY_FILE_BYTES,
    MemoryStoreError,
    _decode_entry,
    _decode_text,
    _encode_entry,
    _human_size,
    _key_in_head,
    checked_path,
    file_view,
)
from .index import INDEX_BUDGET_CHARS, INDEX_SAVE_DELAY, MAX_INDEXED_BYTES, _entry
from .index_entry import LARGE, NOT_UTF8, TEXT, IndexedEntry, matches
from .replies import check_offset, folder_reply, keys_reply, search_reply

R = TypeVar("R")

# The meta fields read before every search: when all are unchanged, so is the namespace. ``gen``
# (the last change's token) tells any two states apart; epoch and seq are there for namespaces
# last changed by an older version, which wrote no gen.
GEN_FIELDS = ("epoch", "seq", "gen")

KEY_PREFIX = "dpt-memory"
DEFAULT_NAMESPACE = "default"
SCHEMES = {"redis": "redis", "rediss": "rediss", "valkey": "redis", "valkeys": "rediss"}
NAME_MAX = 255  # bytes of one path component, as on the folder store's file systems
FOLDER_SIZE = 4096  # what memory_view shows for a folder (Redis keeps none; ext4's size)
EDIT_ATTEMPTS = 100  # compare-and-set rounds before an edit gives up (each lost to a newer write)
FETCH_BATCH = 1000  # entries fetched per script call when the index catches up
FETCH_PIPELINE = 10  # script calls per round trip
CONNECT_TIMEOUT = 2.0  # seconds
SOCKET_TIMEOUT = 10.0  # seconds for a reply
_SIG_MASK = (1 << 63) - 1  # an entry's sig is saved as signed 64-bit integers


def change_token() -> str:
    """A change's token (``ARGV[1]`` of the scripts): 15 random hex digits, 60 bits."""
    return f"{secrets.randbits(60):015x}"


def version_sig(version: bytes) -> int:
    """A file's version (hex digits: a change token, maybe with a suffix) as the integer kept in
    its index entry; a version written by something else is hashed."""
    try:
        return int(version, 16) & _SIG_MASK
    except ValueError:
        return zlib.crc32(version) | (1 << 62)


def redact(url: str) -> str:
    """*url* without its password (``***``) and without its query."""
    from ..embedded_redis import redact as _redact

    return _redact(url.split("?", 1)[0])


def split_store_url(url: str) -> tuple[str, str]:
    """(connection url for redis-py, namespace) of ``redis://host:6379/2?namespace=team-a``;
    ValueError for another scheme or another query key (a typo must not pick the default)."""
    parts = urlsplit(url)
    scheme = SCHEMES.get(parts.scheme.lower())
    if scheme is None:
        raise ValueError(
            f"{redact(url)!r} is not a Redis url: it must start with redis://, rediss://, "
            "valkey:// or valkeys://"
        )
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"namespace"})
    if unknown:
        raise ValueError(
            f"unknown query key {quote(unknown[0], 60)!r} in {redact(url)!r}: the only one is "
            "namespace (redis://HOST:PORT/DB?namespace=NAME)"
        )
    namespace = query.get("namespace", [DEFAULT_NAMESPACE])[-1]
    return urlunsplit(parts._replace(scheme=scheme, query="")), namespace


def namespace_problem(namespace: str) -> str | None:
    """Why *namespace* cannot be one (it goes between the braces of a hash tag), or None."""
    if not namespace:
        return "the namespace must not be empty"
    if any(c in namespace for c in "{}") or not namespace.isprintable() or " " in namespace:
        return f"the namespace {namespace!r} may not contain braces, spaces or control characters"
    if len(namespace) > 200:
        return "the namespace is over 200 characters"
    return None


class RedisStoreError(MemoryStoreError):
    """Redis could not be used (unreachable, out of memory, wrong password): nothing was changed."""

    store_fault = True  # counted in dpt_store_errors_total (telemetry.note_store_fault)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


class RedisMemory:
    """One namespace of one Redis: its connection, scripts, and the error translation."""

    def __init__(
        self,
        url: str | None,
        namespace: str = DEFAULT_NAMESPACE,
        *,
        connect_url: Callable[[], str] | None = None,
        label: str | None = None,
        cluster: bool = False,
    ) -> None:
        self.url = url
        self.namespace = namespace
        self.cluster = cluster  # a Redis Cluster: redis-py's RedisCluster follows the slots
        self._connect_url = connect_url  # embedded: (re)starts the server, returns its url
        self.label = label or (redact(url) if url else "the embedded redis-server")
        tag = "{" + namespace + "}"
        self.keys = [f"{KEY_PREFIX}:{tag}:{part}" for part in ("files", "versions", "dirs", "meta")]
        self.k_files, self.k_versions, self.k_dirs, self.k_meta = self.keys
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        """The store, for messages: its url without password, and its namespace."""
        return f"{self.label} (namespace {self.namespace})"

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import redis
                from redis.backoff import NoBackoff
                from redis.retry import Retry

                url = self._connect_url() if self._connect_url else self.url
                assert url is not None
                kind: Any = redis.Redis
                if self.cluster:
                    from redis.cluster import RedisCluster as kind
                self._client = kind.from_url(
                    split_store_url(url)[0],
                    socket_connect_timeout=CONNECT_TIMEOUT,
                    socket_timeout=SOCKET_TIMEOUT,
                    retry=Retry(
                        NoBackoff(), 0
                    ),  # a lost reply is an error, never a change sent twice
                )
                self._scripts = {}
            return self._client

    def script(self, source: str) -> Any:
        client = self.client()
        found = self._scripts.get(source)
        if found is None:
            found = self._scripts[source] = client.register_script(source)
        return found

    def run(self, source: str, *args: Any) -> list[Any]:
        """Run a change script: ``[status, ...]`` with status decoded."""
        reply = self.script(source)(keys=self.keys, args=[change_token(), *args])
        return [reply[0].decode(), *reply[1:]]

    def read_script(self, source: str, *args: Any) -> list[Any]:
        return list(self.script(source)(keys=self.keys, args=list(args)))

    def fix(self) -> str:
        if self._connect_url is not None:
            return "check that redis-server can run here (see dpt-launch --check)"
        return "start it, or correct memory-tools' url setting"

    def translate(self, exc: BaseException) -> RedisStoreError:
        """One line naming the store (no password) and the fix."""
        import redis

        reason = _reason(exc)
        if isinstance(exc, redis.AuthenticationError) or (
            isinstance(exc, redis.ResponseError) and reason.startswith(("WRONGPASS", "NOAUTH"))
        ):
            return RedisStoreError(
                f"Redis at {self.label} refused the credentials ({reason}); put the right "
                "user and password in memory-tools' url setting (redis://USER:PASSWORD@host:port/db); "
                "nothing was changed"
            )
        if isinstance(exc, redis.ResponseError) and (
            reason.startswith("OOM") or "used memory > 'maxmemory'" in reason
        ):
            return RedisStoreError(
                f"Redis at {self.label} is out of memory (maxmemory reached, noeviction); nothing "
                "was changed: raise its maxmemory or delete memories you no longer need"
            )
        if isinstance(exc, redis.exceptions.RedisClusterException):
            self.reset()
            return RedisStoreError(
                f"Cannot use Redis Cluster at {self.label} ({reason}); start it, or correct "
                "memory-tools' url setting (cluster: true needs a Redis Cluster)"
            )
        if isinstance(exc, redis.exceptions.MovedError | redis.exceptions.AskError):
            return RedisStoreError(
                f"Redis at {self.label} is a Redis Cluster (this namespace's slot is on "
                f"{reason.split()[-1]}); set memory-tools' "
                "cluster setting to true; nothing was changed"
            )
        if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
            self.reset()
            return RedisStoreError(f"Cannot reach Redis at {self.label} ({reason}); {self.fix()}")
        if isinstance(exc, redis.ResponseError) and reason.startswith("READONLY"):
            return RedisStoreError(
                f"Redis at {self.label} is a read-only replica ({reason}); point memory-tools' "
                "url at the primary; nothing was changed"
            )
        return RedisStoreError(f"Redis at {self.label} refused the command: {reason}")

    def reset(self) -> None:
        """After a call failed to reach Redis: redis-py has closed that call's connection.

        The pool's other connections may be carrying other calls right now: closing them would
        fail those calls too ("Bad file descriptor"), so only the idle ones are closed (a
        restarted Redis left them dead). Embedded, or on a cluster, the client is dropped as
        well, so that the next call connects afresh (embedded: starts the server again); calls
        still in flight on it finish on their own connections.
        """
        with self._lock:
            client = self._client
            if self._connect_url is not None or self.cluster:
                self._client = None
        if client is not None:
            with suppress(Exception):  # a broken pool: its connections are checked when taken
                for pool in _pools(client):
                    pool.disconnect(inuse_connections=False)

    @contextmanager
    def guard(self) -> Iterator[None]:
        import redis

        try:
            yield
        except MemoryStoreError:
            raise
        except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
            raise self.translate(exc) from None
        except Exception as exc:  # e.g. the embedded server could not start
            if type(exc).__name__ == "EmbeddedRedisError":
                self.reset()
                raise RedisStoreError(f"The embedded redis-server cannot be used: {exc}") from None
            raise

    def ping(self) -> str | None:
        """Why the store cannot be used now (one line), or None."""
        try:
            with self.guard():
                self.client().ping()
        except MemoryStoreError as exc:
            return str(exc)
        return None


def _pools(client: Any) -> list[Any]:
    """The connection pools of a redis-py client: its own, or a cluster client's, one per node."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return [pool]
    nodes = client.get_nodes()
    return [n.redis_connection.connection_pool for n in nodes if n.redis_connection is not None]


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
        self._index_lock = threading.Lock()
        self._gen: tuple[Any, ...] | None = None  # GEN_FIELDS when the entries were caught up
        self._entries: dict[str, IndexedEntry] = {}
        self._kept = 0
        self._tried_saved = False
        self._save_pending = False

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
        from .keys import KeyValueStore

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
        with self.db.guard():
            status, *rest = self.db.run(lua.WRITE, name, data, HEAD_BYTES)
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
        with self.db.guard():
            (status,) = self.db.run(lua.DELETE_FILE, name)
        if status == "isdir":
            raise MemoryStoreError(f"The path /{name} is a directory, not a file")
        if status == "missing":
            raise MemoryStoreError(f"No memory stored under key {key!r}")
        return f"Memory {key!r} deleted."

    @staticmethod
    def _is_entry(name: str) -> bool:
        return "/" not in name and name.endswith(".json") and not name.startswith(".")

    def _indexed(self) -> list[IndexedEntry]:
        """The key-value entries, caught up with Redis (see the module docstring)."""
        client = self.db.client()
        with self._index_lock:
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
        from .index import _index_dir

        store = hashlib.sha256(f"{self.db.label}\0{self.db.namespace}".encode()).digest()
        data = hashlib.sha256(epoch or b"").digest()
        ids = (int.from_bytes(store[:8], "little") >> 1, int.from_bytes(data[:8], "little") >> 1)
        return ids, _index_dir() / f"redis-{store.hex()[:32]}.idx"

    def _load_saved(self, epoch: bytes) -> dict[str, IndexedEntry]:
        from .index_file import decode_index

        ids, path = self._identity(epoch)
        try:
            entries, _listing = decode_index(path.read_bytes(), ids)
        except (OSError, ValueError, IndexError, OverflowError):
            return {}
        return {e.name: e for e in entries}

    def _schedule_save(self) -> None:
        """Save a few seconds from now, or at exit. Caller holds _index_lock."""
        if self._save_pending:
            return
        self._save_pending = True
        _UNSAVED.add(self)
        timer = threading.Timer(INDEX_SAVE_DELAY, self.save_index)
        timer.daemon = True
        timer.start()

    def save_index(self) -> None:
        """Write the saved copy now (atomically; a failure only costs the next process time)."""
        from .index_file import encode_index

        with self._index_lock:
            self._save_pending = False
            _UNSAVED.discard(self)
            entries = list(self._entries.values())
            epoch = self._gen[0] if self._gen else None
        if not entries or epoch is None:
            return
        ids, path = self._identity(epoch)
        try:
            data = encode_index(entries, ids)
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            temp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            temp.write_bytes(data)
            os.replace(temp, path)
        except OSError:
            pass

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
        import redis

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

    def search(self, query: str, offset: int = 0) -> str:
        if not isinstance(query, str):
            raise MemoryStoreError(f"The query must be a string, got {type(query).__name__}")
        check_offset(offset)
        needle = query.casefold()
        with self.db.guard():
            results = matches(self._indexed(), needle, self._stored_value)
        return search_reply(results, offset, self.bounds)

    def _stored_value(self, entry: IndexedEntry) -> str | None:
        """The text value of an entry the index did not keep (over its budget)."""
        data = self.db.client().hget(self.db.k_files, entry.name)
        return None if data is None else _decode_entry(entry.name[:-5], data)[1]

    def list_keys(self, offset: int = 0) -> str:
        check_offset(offset)
        with self.db.guard():
            entries = self._indexed()
        return keys_reply(sorted(entry.key for entry in entries), offset, self.bounds)

    def warm_index(self) -> None:
        """Fetch the entries in the background when served (errors wait for the first call)."""
        try:
            with self.db.guard():
                self._indexed()
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
        with self.db.guard():
            (status,) = self.db.run(lua.CREATE, target, data)
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
            with self.db.guard():
                (status,) = self.db.run(lua.REPLACE_IF, target, version or b"", new_data)
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
        from .files import FileCommands

        return FileCommands.str_replace(self, path, old_str, new_str)  # type: ignore[arg-type]

    def insert(self, path: str, insert_line: int, insert_text: str) -> str:
        from .files import FileCommands

        return FileCommands.insert(self, path, insert_line, insert_text)  # type: ignore[arg-type]

    def delete_path(self, path: str) -> str:
        target, display = self._parse_path(path, "delete")
        if not target:
            raise MemoryStoreError("Cannot delete the memory directory itself")
        with self.db.guard():
            (status,) = self.db.run(lua.DELETE_PATH, target)
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
        with self.db.guard():
            (status,) = self.db.run(lua.RENAME, old, new)
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


_UNSAVED: set[RedisMemoryStore] = set()  # stores with a save of their index pending


@atexit.register
def _save_at_exit() -> None:
    for store in list(_UNSAVED):
        store.save_index()


__all__ = [
    "DEFAULT_NAMESPACE",
    "MAX_KEY_FILE_BYTES",
    "RedisMemory",
    "RedisMemoryStore",
    "RedisStoreError",
    "namespace_problem",
    "redact",
    "split_store_url",
]
