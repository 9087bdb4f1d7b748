"""``dpt-launch memory copy FROM TO``: move a memory-tools store between a folder and Redis.

Each side is a folder path or a Redis url whose namespace is a query parameter
(``redis://host:6379/2?namespace=team-a``; none: the default namespace). Every visible file is
copied byte for byte (a key's ``<key>.json`` is the same bytes on both backends), with the empty
folders; hidden items (a folder store's lock, temp and .gitignore files) and symlinks stay behind. The target
must be empty unless ``--merge`` (then a file of the same path is replaced by the source's). The
copy is verified: the target holds every source path with the same SHA-256.

Wrong input is refused before anything is written (exit 2, one line): a source folder that does
not exist or is not a memory store, a Redis namespace that does not exist, an empty source
(unless ``--allow-empty``), a url query key other than ``namespace``.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import stat
import sys
from collections.abc import Generator
from contextlib import suppress
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from ...locking.folder_locks import LOCK_FILE_NAME
from ...memory import MemoryStore, MemoryStoreError, redis_scripts
from ...memory.folder import GITIGNORE
from ...memory.formats import HEAD_BYTES, is_entry_head
from ...memory.redis_urls import namespace_problem, split_store_url
from ..errors import LauncherError
from .status import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .status import fail as _fail

REDIS_SCHEMES = ("redis://", "rediss://", "valkey://", "valkeys://")
ENTRIES_CHECKED = 100  # top-level .json files read (their head) to tell a memory folder
NAMESPACES_SCANNED = 10_000  # namespaces looked at for one like a missing one
NAMESPACES_NAMED = 10  # namespaces listed when none is like it


class CopyError(LauncherError):
    """The copy is refused; the message says why and what to do."""


class VerifyError(CopyError):
    """The copy was made but does not match its source."""


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


class FolderSide:
    """A memory folder, read and written through the folder store's jail and locks."""

    def __init__(self, path: str) -> None:
        self.label = path
        self.store = MemoryStore(Path(path).expanduser().resolve())

    def walk(self) -> tuple[list[str], list[str]]:
        """(visible files, visible folders), paths relative to the store."""
        root = self.store.memory_dir
        files: list[str] = []
        folders: list[str] = []
        if not root.is_dir():
            return files, folders
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for d in dirnames:
                folders.append(d if rel_dir == "." else f"{rel_dir}/{d}")
            for name in sorted(filenames):
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                if not _hidden(rel) and stat.S_ISREG(os.lstat(os.path.join(dirpath, name)).st_mode):
                    files.append(rel)
        return files, folders

    def read(self, rel: str) -> bytes:
        return (self.store.memory_dir / rel).read_bytes()

    def source_problem(self) -> str | None:
        """Why this folder cannot be copied from, or None. A memory folder holds the
        ``.dpt.lock`` marker (made by the tools' first change), memory-tools' ``.gitignore``,
        or an entry as write_memory writes it."""
        root = self.store.memory_dir
        if not root.exists():
            return f"the source folder {root} does not exist"
        if not root.is_dir():
            return f"the source {root} is not a folder"
        if os.path.lexists(root / LOCK_FILE_NAME):
            return None
        with suppress(OSError):
            if (root / ".gitignore").read_text()[:200].startswith(GITIGNORE.split("\n", 1)[0]):
                return None
        heads = 0
        for name in sorted(os.listdir(root)):
            path = root / name
            if heads >= ENTRIES_CHECKED or not name.endswith(".json") or not path.is_file():
                continue
            heads += 1
            with suppress(OSError), path.open("rb") as handle:
                if is_entry_head(handle.read(HEAD_BYTES)):
                    return None
        inner = root / "agent_memory"
        hint = f" (its memory folder is {inner})" if inner.is_dir() else ""
        return (
            f"{root} is not a memory store{hint}: it has no .dpt.lock marker, no memory-tools "
            ".gitignore and no entry written by write_memory; give the memory folder (if this "
            "is one, create an empty .dpt.lock in it)"
        )

    def put(self, rel: str, data: bytes) -> None:
        with self.store._locked() as jail:
            jail.write_atomic(self.store._abs(jail, rel.split("/")), data, create_parents=True)

    def mkdir(self, rel: str) -> None:
        with self.store._locked() as jail:
            jail.mkdir(self.store._abs(jail, rel.split("/")))


class RedisSide:
    """One namespace of a Redis, through the store's own scripts."""

    def __init__(self, url: str) -> None:
        # (redis-py is the [redis] extra, 0.11 s to import: only a copy from or to Redis needs it)
        from ...memory.redis_connection import RedisMemory

        try:
            connect, namespace = split_store_url(url)
        except ValueError as exc:
            raise CopyError(str(exc)) from None
        problem = namespace_problem(namespace)
        if problem:
            raise CopyError(problem)
        self.db = RedisMemory(connect, namespace)
        self.label = self.db.where

    def source_problem(self) -> str | None:
        """Why this namespace cannot be copied from (it does not exist), or None; the line
        names the namespaces there most like it (a typo), else a few of them."""
        with self.db.guard():
            client = self.db.client()
            if client.exists(*self.db.keys):
                return None
            found = []
            for key in client.scan_iter(match="dpt-memory:{*}:meta", count=1000):
                found.append(key.decode("utf-8", "replace").split("{", 1)[1].rsplit("}", 1)[0])
                if len(found) >= NAMESPACES_SCANNED:
                    break
        close = difflib.get_close_matches(self.db.namespace, found, n=3)
        if close:
            there = "did you mean " + " or ".join(repr(name) for name in close) + "?"
        else:
            shown = sorted(found)[:NAMESPACES_NAMED]
            there = "namespaces there: " + (", ".join(shown) if shown else "none")
            there += ", …" if len(found) > len(shown) else ""
        return (
            f"the namespace {self.db.namespace!r} does not exist in {self.db.label} ({there}); "
            "check ?namespace= in the url"
        )

    def walk(self) -> tuple[list[str], list[str]]:
        with self.db.guard():
            client = self.db.client()
            files = sorted(k.decode() for k in client.hkeys(self.db.k_files))
            folders = sorted(k.decode() for k in client.hkeys(self.db.k_dirs))
        return [f for f in files if not _hidden(f)], [d for d in folders if not _hidden(d)]

    def read(self, rel: str) -> bytes:
        with self.db.guard():
            data = self.db.client().hget(self.db.k_files, rel)
        if data is None:
            raise VerifyError(f"{rel} vanished from {self.label} during the copy")
        return bytes(data)

    def put(self, rel: str, data: bytes) -> None:
        with self.db.guard():
            status = self.db.run(redis_scripts.PUT, rel, data)[0]
        if status != "ok":
            raise CopyError(f"cannot write {rel} in {self.label}: a file and a folder share it")

    def mkdir(self, rel: str) -> None:
        with self.db.guard():
            status = self.db.run(redis_scripts.MKDIR, rel)[0]
        if status != "ok":
            raise CopyError(f"cannot make the folder {rel} in {self.label}: a file has its name")


def open_side(spec: str) -> Any:
    if spec.lower().startswith(REDIS_SCHEMES):
        return RedisSide(spec)
    if "://" in spec:
        raise CopyError(
            f"{spec.split('://')[0]}:// is not a store: give a folder path or a redis://, "
            "rediss://, valkey:// or valkeys:// url"
        )
    return FolderSide(spec)


def _progress(total: int) -> Generator[Any, None, None]:
    """A rich progress bar on a terminal (stderr), else nothing shown."""
    if not sys.stderr.isatty():
        while True:
            yield None
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("copying", total=total)
        while True:
            yield lambda: progress.advance(task)


def copy(source: Any, target: Any, merge: bool, allow_empty: bool = False) -> tuple[int, int]:
    """Copy and verify; (files, folders) copied. Refused (CopyError) before any change when the
    source does not exist, is not a memory store, or is empty (unless *allow_empty*)."""
    problem = source.source_problem()
    if problem is not None:
        raise CopyError(problem)
    files, folders = source.walk()
    if not files and not folders and not allow_empty:
        raise CopyError(
            f"the source {source.label} is empty: nothing to copy (--allow-empty copies it anyway)"
        )
    there, there_folders = target.walk()
    if (there or there_folders) and not merge:
        raise CopyError(
            f"the target {target.label} is not empty ({len(there):,} files): give an empty "
            "target, or --merge to add to it (a file of the same path is replaced)"
        )
    digests: dict[str, str] = {}
    bar = _progress(len(files) + len(folders))
    for rel in folders:
        target.mkdir(rel)
        step = next(bar)
        if step:
            step()
    for rel in files:
        data = source.read(rel)
        digests[rel] = hashlib.sha256(data).hexdigest()
        target.put(rel, data)
        step = next(bar)
        if step:
            step()
    bar.close()
    copied, copied_folders = target.walk()
    missing = set(files) - set(copied)
    if missing:
        raise VerifyError(f"verification failed: {len(missing):,} files missing in {target.label}")
    if not merge and (len(copied) != len(files) or len(copied_folders) != len(folders)):
        raise VerifyError(
            f"verification failed: {target.label} holds {len(copied):,} files and "
            f"{len(copied_folders):,} folders, the source {len(files):,} and {len(folders):,}"
        )
    for rel, digest in digests.items():
        if hashlib.sha256(target.read(rel)).hexdigest() != digest:
            raise VerifyError(
                f"verification failed: {rel} differs in {target.label} (changed meanwhile?)"
            )
    return len(files), len(folders)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="dpt-launch memory",
        description="Copy a memory-tools store: folder -> redis, redis -> folder, redis -> redis.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    cp = sub.add_parser("copy", help="copy every memory from FROM to TO, then verify it")
    cp.add_argument("source", metavar="FROM", help="a folder, or redis://HOST:PORT/DB?namespace=NS")
    cp.add_argument("target", metavar="TO", help="a folder, or redis://HOST:PORT/DB?namespace=NS")
    cp.add_argument("--merge", action="store_true", help="copy into a target that is not empty")
    cp.add_argument(
        "--allow-empty", action="store_true", help="copy an empty source (else refused)"
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        source, target = open_side(args.source), open_side(args.target)
        files, folders = copy(source, target, args.merge, args.allow_empty)
    except (CopyError, MemoryStoreError) as exc:
        refused = isinstance(exc, CopyError) and not isinstance(exc, VerifyError)
        return _fail(f"memory copy: {exc}", EXIT_USAGE if refused else EXIT_FAILURE)
    except OSError as exc:
        return _fail(f"memory copy: {exc.strerror or exc}: {exc.filename or ''}", EXIT_FAILURE)
    print(
        f"Copied {files:,} files and {folders:,} folders from {source.label} to {target.label}; "
        "verified (count and SHA-256)."
    )
    return EXIT_OK
