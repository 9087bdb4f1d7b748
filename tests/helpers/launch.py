"""Real ``dpt-launch`` processes for tests and benchmarks (one place for all of them).

:func:`launched`: one over stdio with the official mcp client's ``ClientSession`` on it.
:func:`http_launcher`: one serving streamable HTTP on a free 127.0.0.1 port: started with
``--port 0``, the port it got read from its first log line (stderr, kept in a file); it
counts as started once ``/health`` answers.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from doc_processing_std_tools.launcher.cli.main import main
from helpers.paths import python_path
from helpers.rpc import request

SPAWN_TIMEOUT = 60
SERVING_LINE = re.compile(r'serving \d+ tools? on (http://127\.0\.0\.1:(\d+)[^\s"]*)')
START_TIMEOUT = 60.0


def launcher_command() -> list[str]:
    """Run the launcher with this interpreter, so tests use the installed package."""
    return [sys.executable, "-m", "doc_processing_std_tools.launcher.cli"]


def _stderr_to(errlog: IO[str] | Path | None) -> contextlib.AbstractContextManager[IO[str]]:
    if isinstance(errlog, Path):
        return errlog.open("w")
    return contextlib.nullcontext(errlog) if errlog else tempfile.TemporaryFile("w+")


@asynccontextmanager
async def launched(
    config: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    list_roots_callback: object = None,
    message_handler: object = None,
    errlog: IO[str] | Path | None = None,
    sampling_callback: object = None,
    elicitation_callback: object = None,
    logging_callback: object = None,
    sampling_capabilities: object = None,
    args: tuple[str, ...] = (),
) -> AsyncIterator[Any]:
    """A ClientSession connected over stdio to a spawned ``dpt-launch --config config``
    (declaring MCP roots, sampling or elicitation when their callback is given). Its stderr
    goes to *errlog*, a file object or a path to write, when given; else it is dropped.
    *args* follow ``--config`` (``--profile NAME``)."""
    params = StdioServerParameters(
        command=launcher_command()[0],
        args=[*launcher_command()[1:], "--config", str(config), *args],
        env={**os.environ, **(env or {})},
        cwd=str(cwd or config.parent),
    )
    with (
        _stderr_to(errlog) as log,
        anyio.fail_after(SPAWN_TIMEOUT),
    ):
        async with (
            stdio_client(params, errlog=log) as (read, write),
            ClientSession(
                read,
                write,
                list_roots_callback=list_roots_callback,  # type: ignore[arg-type]
                message_handler=message_handler,  # type: ignore[arg-type]
                sampling_callback=sampling_callback,  # type: ignore[arg-type]
                elicitation_callback=elicitation_callback,  # type: ignore[arg-type]
                logging_callback=logging_callback,  # type: ignore[arg-type]
                sampling_capabilities=sampling_capabilities,  # type: ignore[arg-type]
            ) as session,
        ):
            await session.initialize()
            yield session


def text_of(result: object) -> str:
    """The joined text content of a CallToolResult."""
    return "".join(getattr(block, "text", "") for block in result.content)  # type: ignore[attr-defined]


async def tool_names(session: Any) -> set[str]:
    """The names *session* lists now."""
    return {tool.name for tool in (await session.list_tools()).tools}


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

    ``tests/`` is on its ``PYTHONPATH`` (``module: helpers.servers...`` mounts) unless *env* sets
    ``PYTHONPATH``; its stderr goes to *errlog* (default ``stderr.log`` beside the config).
    """
    errlog = errlog or config.parent / "stderr.log"
    with errlog.open("wb") as err:
        proc = subprocess.Popen(
            [*launcher_command(), "--config", str(config), "--port", "0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": python_path(), **(env or {})},
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


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``dpt-launch ARGS`` run in-process: (exit status, stdout, stderr)."""
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err
