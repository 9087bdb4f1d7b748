"""A ``dpt-launch`` serving streamable HTTP on a free 127.0.0.1 port, for tests and
benchmarks (one place for all of them).

The launcher is started with ``--port 0``; the port it got is read from its first log
line (stderr, kept in a file), and the launcher counts as started once ``/health``
answers. Benchmarks import this module with ``tests/`` put on ``sys.path``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rpc_helpers import request

TESTS = Path(__file__).resolve().parent
SERVING_LINE = re.compile(r'serving \d+ tools? on (http://127\.0\.0\.1:(\d+)[^\s"]*)')
START_TIMEOUT = 60.0


@dataclass
class Launched:
    proc: subprocess.Popen[bytes]
    port: int
    url: str  # the MCP endpoint
    errlog: Path

    def stderr(self) -> str:
        return self.errlog.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


@contextmanager
def http_launcher(
    config: Path,
    *,
    args: Sequence[str] = ("--transport", "http"),
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    errlog: Path | None = None,
) -> Iterator[Launched]:
    """``dpt-launch --config CONFIG --port 0 ARGS``, stopped with SIGTERM (then killed) on exit.

    ``tests/`` is on its ``PYTHONPATH`` (the sample servers live there) unless *env* sets
    ``PYTHONPATH``; its stderr goes to *errlog* (default ``stderr.log`` beside the config).
    """
    errlog = errlog or config.parent / "stderr.log"
    pythonpath = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "doc_processing_std_tools.launcher.cli"]
    with errlog.open("wb") as err:
        proc = subprocess.Popen(
            [*command, "--config", str(config), "--port", "0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": pythonpath, **(env or {})},
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not (found := SERVING_LINE.search(errlog.read_text(errors="replace"))):
            assert proc.poll() is None, errlog.read_text(errors="replace")
            assert time.monotonic() < deadline, errlog.read_text(errors="replace")
            time.sleep(0.05)
        port = int(found.group(2))
        wait_until_serving(port)
        yield Launched(proc, port, found.group(1), errlog)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_until_serving(port: int, timeout: float = 30) -> None:
    """Return once ``/health`` on *port* answers 200."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if request(port, "GET", "/health").status == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, "the launcher never answered /health"
        time.sleep(0.05)
