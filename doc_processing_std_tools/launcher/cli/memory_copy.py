"""``dpt-launch memory copy FROM TO``: move a memory-tools store between a folder and Redis.

Each side is a folder path or a Redis url whose namespace is a query parameter
(``redis://host:6379/2?namespace=team-a``; none: the default namespace). Every visible file is
copied byte for byte (a key's ``<key>.json`` is the same bytes on both backends), with the empty
folders; hidden items (a folder store's lock, temp and .gitignore files) and symlinks stay behind. The target
must be empty unless ``--merge`` (then a file of the same path is replaced by the source's). The
copy is verified: the target holds every source path with the same SHA-256.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import stat
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

from .status import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .status import fail as _fail

REDIS_SCHEMES = ("redis://", "rediss://", "valkey://", "valkeys://")


class CopyError(Exception):
    """The copy is refused; the message says why and what to do."""


class VerifyError(CopyError):
    """The copy was made but does not match its source."""


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


class FolderSide:
    """A memory folder, read and written through the folder store's jail and locks."""

    def __init__(self, path: str) -> None:
        from ...memory import MemoryStore

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

    def put(self, rel: str, data: bytes) -> None:
        with self.store._locked() as jail:
            jail.write_atomic(self.store._abs(jail, rel.split("/")), data, create_parents=True)

    def mkdir(self, rel: str) -> None:
        with self.store._locked() as jail:
            jail.mkdir(self.store._abs(jail, rel.split("/")))


class RedisSide:
    """One namespace of a Redis, through the store's own scripts."""

    def __init__(self, url: str) -> None:
        from ...memory.redis_store import RedisMemory, namespace_problem, split_store_url

        try:
            connect, namespace = split_store_url(url)
        except ValueError as exc:
            raise CopyError(str(exc)) from None
        problem = namespace_problem(namespace)
        if problem:
            raise CopyError(problem)
        self.db = RedisMemory(connect, namespace)
        self.label = self.db.where

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
        from ...memory import redis_scripts

        with self.db.guard():
            status = self.db.run(redis_scripts.PUT, rel, data)[0]
        if status != "ok":
            raise CopyError(f"cannot write {rel} in {self.label}: a file and a folder share it")

    def mkdir(self, rel: str) -> None:
        from ...memory import redis_scripts

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
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("copying", total=total)
        while True:
            yield lambda: progress.advance(task)


def copy(source: Any, target: Any, merge: bool) -> tuple[int, int]:
    """Copy and verify; (files, folders) copied."""
    files, folders = source.walk()
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
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    from ...memory import MemoryStoreError

    args = parse(argv)
    try:
        source, target = open_side(args.source), open_side(args.target)
        files, folders = copy(source, target, args.merge)
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
