"""memory-tools folders for tests and benchmarks (one place for both): entries written as
another program would write them, and the peak memory of a fresh process that lists and
searches a folder. Benchmarks import this module with ``tests/`` put on ``sys.path``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# Run in a fresh process: argv[1] the folder, argv[2] the search query.
_PEAK_PROBE = """
import json, resource, sys
from doc_processing_std_tools.memory import MemoryStore
from doc_processing_std_tools.shared.reply_bounds import ReplyBounds

def peak_kb():
    # VmHWM: this process's own peak (ru_maxrss may keep the peak of the process that
    # forked us, carried over by exec)
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

store = MemoryStore(sys.argv[1], ReplyBounds(10**9, 10**12))  # uncapped: every entry read
keys = json.loads(store.list_keys())
found = json.loads(store.search(sys.argv[2]))
print(json.dumps({"keys": keys, "found": len(found), "rss_kb": peak_kb()}))
"""


def write_entry(folder: Path, key: str, value: str) -> Path:
    """Write an entry as another program would (no store involved)."""
    path = folder / f"{key}.json"
    path.write_text(json.dumps({"key": key, "value": value}))
    return path


def write_sparse(path: Path, size: int = 1 << 30) -> None:
    """A file of *size* bytes (1 GB by default) that takes no disk space."""
    with open(path, "wb") as handle:
        handle.truncate(size)


def list_and_search_peak(folder: Path, query: str, cache_dir: Path) -> dict[str, Any]:
    """A fresh process lists *folder*'s keys and searches *query*: ``{"keys": [...],
    "found": n, "rss_kb": its peak resident memory}`` (VmHWM, else ru_maxrss; not timed)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_dir)}
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_PROBE, str(folder), query],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=300,
    )
    return json.loads(out.stdout)


class FolderFiles:
    """The content of a folder store, as the tests look at it (paths relative to the store)."""

    backend = "folder"

    def __init__(self, root: Path) -> None:
        self.root = root

    def read_bytes(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    def exists(self, rel: str) -> bool:
        return (self.root / rel).exists()

    def is_dir(self, rel: str) -> bool:
        return (self.root / rel).is_dir()

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write as another program would (no store involved)."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def write_text(self, rel: str, text: str) -> None:
        self.write_bytes(rel, text.encode("utf-8"))

    def mkdir(self, rel: str) -> None:
        (self.root / rel).mkdir(parents=True, exist_ok=True)

    def files(self) -> dict[str, bytes]:
        """Every visible file: path -> bytes."""
        return {
            str(p.relative_to(self.root)): p.read_bytes()
            for p in sorted(self.root.rglob("*"))
            if p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(self.root).parts)
        }


class RedisFiles(FolderFiles):
    """The content of one Redis namespace, read and written with plain redis commands."""

    backend = "redis"

    def __init__(self, url: str, namespace: str) -> None:
        import redis

        from doc_processing_std_tools.memory.redis_connection import RedisMemory

        self.url, self.namespace = url, namespace
        self.memory = RedisMemory(url, namespace)
        self.redis = redis.Redis.from_url(url)

    def read_bytes(self, rel: str) -> bytes:
        data = self.redis.hget(self.memory.k_files, rel)
        if data is None:
            raise FileNotFoundError(rel)
        return data

    def exists(self, rel: str) -> bool:
        return bool(
            self.redis.hexists(self.memory.k_files, rel)
            or self.redis.hexists(self.memory.k_dirs, rel)
        )

    def is_dir(self, rel: str) -> bool:
        return rel in ("", ".") or bool(self.redis.hexists(self.memory.k_dirs, rel))

    def write_bytes(self, rel: str, data: bytes) -> None:
        from doc_processing_std_tools.memory import redis_scripts

        status = self.memory.run(redis_scripts.PUT, rel, data)[0]
        assert status == "ok", status

    def mkdir(self, rel: str) -> None:
        from doc_processing_std_tools.memory import redis_scripts

        assert self.memory.run(redis_scripts.MKDIR, rel)[0] == "ok"

    def files(self) -> dict[str, bytes]:
        return {
            k.decode(): v
            for k, v in sorted(self.redis.hgetall(self.memory.k_files).items())
            if not any(part.startswith(".") for part in k.decode().split("/"))
        }


def redis_settings(url: str, namespace: str) -> dict[str, str]:
    return {"backend": "redis", "url": url, "namespace": namespace}
