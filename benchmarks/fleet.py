"""Calls/s through HAProxy in front of 1, 2 and 3 stateless launchers, and the CPU each part
spends per call (balancer, launchers, redis-server, the load generator itself).

The fleet is the one ``tests/end_to_end/test_fleet.py`` runs: HAProxy with the config of
docs/scaling.md, launchers on one config (memory-tools on one shared folder, the fleet lock
on one redis-server). Two workloads, each for ``--seconds``:

- ``read``: ``memory_view`` of a small file (no lock: every launcher works at once);
- ``write``: ``memory_create`` of a new file (the process lock, ``flock`` and the fleet
  lock on Redis: one call at a time across the fleet).

The load comes from ``--connections`` keep-alive HTTP/1.1 connections of a small asyncio
client in this process (prebuilt requests, JSON replies). CPU figures are the
``utime + stime`` deltas of /proc/PID/stat (children included for the launchers) divided by
the calls served.

``figures(quick)`` (``run.py``'s ``fleet`` section) runs 1, 2 and 3 launchers with 16
connections for 10 s per row (3 s with ``quick``) and also gives what the model in
docs/scaling.md reads from them: the calls/s one core could serve of each part (1 / its CPU per
call) and what the second and third launchers add.

Run: ``python benchmarks/fleet.py [--seconds 10] [--connections 16] [--launchers 1 2 3]``
(Linux, needs haproxy and redis-server). Not run in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from helpers.fleet import HAPROXY, fleet_config, launchers, running_haproxy  # noqa: E402
from helpers.redis_server import running_redis  # noqa: E402
from helpers.rpc import PROTOCOL, message  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, children: bool = False) -> float:
    """utime + stime of *pid* (and of its waited-for children with *children*), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    used = int(fields[11]) + int(fields[12])
    if children:
        used += int(fields[13]) + int(fields[14])
    return used / TICKS


def post(port: int, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {PROTOCOL}\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode() + data


async def one_connection(
    port: int, requests: itertools.count, make: object, until: float, done: list[int]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < until:
            writer.write(make(next(requests)))  # type: ignore[operator]
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await reader.readexactly(length)
            if b" 200 " in status and b'"isError":true' not in body:
                done[0] += 1
            else:
                done[1] += 1
                if done[1] == 1:
                    print(
                        "first failure:", status.decode().strip(), body[:300].decode(), flush=True
                    )
    finally:
        writer.close()


REQUESTS = itertools.count()  # one numbering for every run: each write makes a new file


async def load(port: int, make: object, seconds: float, connections: int) -> tuple[int, int]:
    done = [0, 0]
    until = time.monotonic() + seconds
    requests = REQUESTS
    await asyncio.gather(
        *(one_connection(port, requests, make, until, done) for _ in range(connections))
    )
    return done[0], done[1]


def measure(count: int, args: argparse.Namespace, base: Path) -> list[dict]:
    shared = base / "shared"
    rows = []
    with ExitStack() as stack:
        redis_port = stack.enter_context(running_redis(base))
        config = fleet_config(base, memory_dir=str(shared), redis_port=redis_port, stateless=True)
        fleet = stack.enter_context(launchers(base, config, count, machines=1))
        port, haproxy = stack.enter_context(
            running_haproxy(base, [launched.port for launched in fleet], sessions=False)
        )
        shared.mkdir(parents=True, exist_ok=True)
        (shared / "small.txt").write_text("a small file\n")  # /memories/small.txt to the tools

        def read(n: int) -> bytes:
            return post(
                port,
                message(
                    "tools/call",
                    {"name": "memory_view", "arguments": {"path": "/memories/small.txt"}},
                    id=n,
                ),
            )

        def write(n: int) -> bytes:
            arguments = {"path": f"/memories/w{count}-{n}.txt", "file_text": "x"}
            return post(
                port, message("tools/call", {"name": "memory_create", "arguments": arguments}, id=n)
            )

        pids = {"balancer": [haproxy.pid], "launchers": [each.proc.pid for each in fleet]}
        pids["redis"] = [
            int(pid)
            for pid in os.popen(f"pgrep -f 'redis-server 127.0.0.1:{redis_port}'").read().split()
        ]
        for workload, make in (("read", read), ("write", write)):
            asyncio.run(load(port, make, 1.0, args.connections))  # warm-up
            before = {
                part: sum(cpu_seconds(p, children=True) for p in ps) for part, ps in pids.items()
            }
            client_before = sum(os.times()[:2])
            start = time.monotonic()
            ok, failed = asyncio.run(load(port, make, args.seconds, args.connections))
            elapsed = time.monotonic() - start
            client = sum(os.times()[:2]) - client_before
            after = {
                part: sum(cpu_seconds(p, children=True) for p in ps) for part, ps in pids.items()
            }
            row = {
                "launchers": count,
                "workload": workload,
                "calls_per_s": ok / elapsed,
                "failed": failed,
                **{f"{part}_ms": 1000 * (after[part] - before[part]) / max(ok, 1) for part in pids},
                "client_ms": 1000 * client / max(ok, 1),
            }
            rows.append(row)
            print(
                f"{count:>9} {workload:>8} {row['calls_per_s']:9.0f} {failed:>6} "
                f"{row['balancer_ms']:9.3f} {row['launchers_ms']:9.3f} {row['redis_ms']:7.3f} "
                f"{row['client_ms']:7.3f}",
                flush=True,
            )
    return rows


PARTS = {
    "balancer_ms": "HAProxy",
    "launchers_ms": "launchers (sum)",
    "redis_ms": "redis-server",
    "client_ms": "load generator",
}


def unavailable() -> str | None:
    """Why the fleet cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return "needs Linux (/proc)"
    if HAPROXY is None:
        return "needs haproxy (apt-get install haproxy)"
    if shutil.which("redis-server") is None:
        return "needs redis-server"
    return None


def figures(quick: bool = False) -> dict[str, float]:
    """Every row as named figures, then the model's inputs read from them."""
    args = argparse.Namespace(seconds=3.0 if quick else 10.0, connections=16)
    rows: list[dict] = []
    for count in (1, 2, 3):
        with tempfile.TemporaryDirectory() as tmp:
            rows += measure(count, args, Path(tmp))
    found: dict[str, float] = {}
    by = {(row["launchers"], row["workload"]): row for row in rows}
    for row in rows:
        head = (
            f"{row['launchers']} launcher{'s' if row['launchers'] > 1 else ''}, {row['workload']}"
        )
        found[f"{head}: calls/s"] = row["calls_per_s"]
        found[f"{head}: failed calls (count)"] = row["failed"]
        for key, part in PARTS.items():
            found[f"{head}: {part} CPU ms per call"] = row[key]
    one_read, one_write = by[(1, "read")], by[(1, "write")]
    found["one launcher's core, reads: 1 / its CPU per call (calls/s)"] = (
        1000 / one_read["launchers_ms"]
    )
    found["one HAProxy core: 1 / its CPU per read (calls/s)"] = 1000 / one_read["balancer_ms"]
    found["one redis-server core: 1 / its CPU per locked write (calls/s)"] = 1000 / max(
        one_write["redis_ms"], 1e-6
    )
    for workload in ("read", "write"):
        rates = [by[(count, workload)]["calls_per_s"] for count in (1, 2, 3)]
        found[f"{workload}s: the second launcher adds (%)"] = 100 * (rates[1] / rates[0] - 1)
        found[f"{workload}s: the third launcher adds (%)"] = 100 * (rates[2] / rates[1] - 1)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--launchers", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, {args.connections} connections, {args.seconds:g} s per row")
    print("CPU ms per call:")
    print(
        f"{'launchers':>9} {'workload':>8} {'calls/s':>9} {'failed':>6} {'balancer':>9} {'launchers':>9} {'redis':>7} {'client':>7}"
    )
    for count in args.launchers:
        with tempfile.TemporaryDirectory() as tmp:
            measure(count, args, Path(tmp))


if __name__ == "__main__":
    main()
