"""memory-tools on Redis vs on a folder, side by side through ``dpt-launch`` over stdio (issue 27).

1. write_memory + read_memory pairs, sequential: calls/s on redis / on a folder (target >= 0.80).
2. search_memory over 10,000 and 100,000 keys (``--quick``: one round at 100,000), redis / folder (target
   <= 2.0): a launcher's first search with no saved index (it reads every entry), a launcher's
   first search over the index an earlier launcher saved (both stores save one in the user
   cache folder), and later searches.
   The same entries on both: the folder's ``<key>.json`` files, byte for byte, in the namespace.

Uses a throw-away local redis-server (no persistence). Run: ``python benchmarks/memory_redis.py
[--quick]``, or through ``run.py`` (section ``memory_redis``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from memory_scale import SETTLE_SECONDS, launch_command, make_folder, session_calls

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers.redis_server import running_redis


def config(workdir: Path, name: str, settings: str) -> Path:
    path = workdir / f"{name}.yaml"
    path.write_text(f"servers:\n  memory:\n    server: memory-tools\n    settings: {settings}\n")
    return path


def env(workdir: Path, cache: str = "cache") -> dict[str, str]:
    """The launcher's environment; *cache* is the user cache folder its index is saved in."""
    return {**os.environ, "XDG_CACHE_HOME": str(workdir / cache), "FASTMCP_LOG_LEVEL": "WARNING"}


def pair_rate(config_path: Path, workdir: Path, pairs: int) -> float:
    calls: list[tuple[str, dict]] = []
    for i in range(pairs):
        calls.append(("write_memory", {"key": f"k{i % 50}", "value": f"value {i} " * 20}))
        calls.append(("read_memory", {"key": f"k{i % 50}"}))
    done = anyio.run(session_calls, launch_command(config_path), env(workdir), calls)
    return len(done) / sum(elapsed for elapsed, _text in done)


def fill_namespace(url: str, namespace: str, folder: Path) -> None:
    """The folder's entries, byte for byte, into the namespace (the write path is not measured)."""
    import redis

    from doc_processing_std_tools.memory.redis_connection import RedisMemory

    keys = RedisMemory(url, namespace)
    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for n, path in enumerate(sorted(folder.iterdir())):
        if path.name.startswith("."):
            continue
        pipe.hset(keys.k_files, path.name, path.read_bytes())
        pipe.hset(keys.k_versions, path.name, n + 1)
        if n % 5000 == 4999:
            pipe.execute()
    pipe.hset(keys.k_meta, mapping={"epoch": "bench", "seq": 1 << 40})
    pipe.execute()


def search_times(config_path: Path, workdir: Path, expected: int, cache: str) -> list[float]:
    """Seconds of a fresh launcher's four searches (the first one cold), with the user cache
    folder *cache* (a new one: no saved index; else the index the last launcher saved)."""
    search = ("search_memory", {"query": "needle"})
    done = anyio.run(session_calls, launch_command(config_path), env(workdir, cache), [search] * 4)
    for _elapsed, text in done:
        assert len(json.loads(text)) == expected, text[:200]
    return [elapsed for elapsed, _text in done]


def figures(quick: bool = False) -> dict[str, float]:
    out: dict[str, float] = {}
    rounds = 3 if quick else 5
    with tempfile.TemporaryDirectory(prefix="dpt-bench-redis-") as tmp:
        workdir = Path(tmp)
        with running_redis(workdir) as port:
            url = f"redis://127.0.0.1:{port}/0"
            folder_cfg = config(workdir, "folder", f"{{memory_dir: {workdir / 'pairs'}}}")
            redis_cfg = config(workdir, "redis", f"{{url: '{url}', namespace: pairs}}")
            folder_rates, redis_rates = [], []
            for _ in range(rounds):  # interleaved: the machine's noise hits both
                folder_rates.append(pair_rate(folder_cfg, workdir, 200))
                redis_rates.append(pair_rate(redis_cfg, workdir, 200))
            folder_rate, redis_rate = (
                statistics.median(folder_rates),
                statistics.median(redis_rates),
            )
            out["write_memory+read_memory on a folder (calls/s)"] = folder_rate
            out["write_memory+read_memory on redis (calls/s)"] = redis_rate
            out["write+read calls/s redis / folder ratio (target >= 0.80)"] = (
                redis_rate / folder_rate
            )
            for keys in (10_000, 100_000):
                folder = workdir / f"mem-{keys}"
                expected = make_folder(folder, keys)
                namespace = f"s{keys}"
                fill_namespace(url, namespace, folder)
                time.sleep(SETTLE_SECONDS)
                f_cfg = config(workdir, f"f{keys}", f"{{memory_dir: {folder}}}")
                r_cfg = config(workdir, f"r{keys}", f"{{url: '{url}', namespace: {namespace}}}")
                runs: dict[str, dict[str, list[float]]] = {
                    side: {"cold": [], "saved": [], "warm": []} for side in ("folder", "redis")
                }
                for round_ in range(1 if quick and keys > 10_000 else rounds):  # interleaved
                    for side, cfg in (("folder", f_cfg), ("redis", r_cfg)):
                        cache = f"cache-{side}-{keys}-{round_}"  # new: no saved index
                        times = search_times(cfg, workdir, expected, cache)
                        runs[side]["cold"].append(times[0])
                        runs[side]["warm"].append(statistics.median(times[1:]))
                        runs[side]["saved"].append(search_times(cfg, workdir, expected, cache)[0])
                label = f"{keys // 1000}k keys"
                ms = {
                    (side, kind): statistics.median(values) * 1000
                    for side, kinds in runs.items()
                    for kind, values in kinds.items()
                }
                names = {
                    "cold": "first search, no saved index",
                    "saved": "first search, index saved by an earlier launcher",
                    "warm": "later searches",
                }
                for kind, name in names.items():
                    out[f"search_memory {label} on a folder, {name} (ms)"] = ms["folder", kind]
                    out[f"search_memory {label} on redis, {name} (ms)"] = ms["redis", kind]
                for kind, name in names.items():
                    out[f"search_memory {label} redis / folder ratio, {name} (target <= 2.0)"] = (
                        ms["redis", kind] / ms["folder", kind]
                    )
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    for name, value in figures("--quick" in sys.argv).items():
        print(f"{name}: {value:,.2f}")
