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

store = MemoryStore(sys.argv[1])
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
