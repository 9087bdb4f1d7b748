"""A fleet on one machine for tests and benchmarks: launchers on "machines" of their own (own
HOME, working folder and runtime folder), HAProxy in front (its config read from
docs/scaling.md), and raw stdio clients through ``dpt-launch connect``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from doc_processing_std_tools.embedded_redis import free_port
from helpers.launch import Launched, http_launcher, wait_until_serving
from helpers.paths import REPO, SERVERS
from helpers.rpc import initialize_params, message

SCALING_DOC = REPO / "docs" / "scaling.md"
HAPROXY = shutil.which("haproxy") or (
    "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
)
SESSION_LINES = (
    "balance hdr(Mcp-Session-Id)",
    "stick-table type string len 64 size 1m expire 1h",
    "stick store-response res.hdr(Mcp-Session-Id)",
    "stick match req.hdr(Mcp-Session-Id)",
)


def machine(base: Path, name: str) -> tuple[Path, dict[str, str]]:
    """A folder standing for one machine, and the environment of a launcher on it (nothing of
    the user's, nothing of another machine's: HOME, the XDG folders, TMPDIR)."""
    root = base / name
    env = {"HOME": str(root / "home"), "TMPDIR": str(root / "tmp")}
    for key, sub in (
        ("XDG_RUNTIME_DIR", "run"),
        ("XDG_CACHE_HOME", "cache"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_STATE_HOME", "state"),
    ):
        env[key] = str(root / sub)
    for folder in env.values():
        Path(folder).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "run", 0o700)
    return root, env


def haproxy_config(backends: list[int], port: int, *, sessions: bool) -> str:
    """The config of docs/scaling.md with *port* bound and *backends* as its servers."""
    text = SCALING_DOC.read_text(encoding="utf-8")
    found = re.search(r"```haproxy\n# dpt-fleet-haproxy\n(.*?)```", text, re.S)
    assert found, "docs/scaling.md lost its HAProxy config"
    lines = []
    for line in found.group(1).splitlines():
        stripped = line.strip()
        if stripped.startswith("bind :"):
            line = f"    bind 127.0.0.1:{port}"
        elif stripped.startswith("server ") or (sessions and stripped == "balance roundrobin"):
            continue
        elif sessions and stripped.lstrip("# ") in SESSION_LINES:
            line = "    " + stripped.lstrip("# ")
        lines.append(line)
    lines += [f"    server l{i + 1} 127.0.0.1:{p}" for i, p in enumerate(backends)]
    return "\n".join(lines) + "\n"


@contextmanager
def running_haproxy(
    folder: Path, backends: list[int], *, sessions: bool
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """HAProxy in the foreground on a free port in front of *backends*; yields (port, process)."""
    assert HAPROXY, "needs haproxy (Debian: apt-get install haproxy)"
    port = free_port()
    config = folder / "haproxy.cfg"
    config.write_text(haproxy_config(backends, port, sessions=sessions), encoding="utf-8")
    check = subprocess.run([HAPROXY, "-c", "-q", "-f", str(config)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr + check.stdout
    with (folder / "haproxy.log").open("wb") as log:
        proc = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], stdout=log, stderr=log)
    try:
        wait_until_serving(port)
        yield port, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fleet_config(
    folder: Path,
    *,
    memory_dir: str,
    redis_port: int,
    stateless: bool,
    lease: float = 5.0,
    writer: bool = False,
    timeout: float = 30.0,
) -> Path:
    """One config for every launcher of the fleet: memory-tools on *memory_dir* (expanded by each
    launcher: ``${HOME}/memory`` is one per machine), the fleet
    lock on the redis-server at *redis_port* and, with *writer*, the lock-always writer."""
    writer_entry = (
        "  writer:\n"
        f"    command: {json.dumps(sys.executable)}\n"
        f"    args: [{json.dumps(str(SERVERS / 'fleet_writer.py'))}, '{redis_port}']\n"
        "    lock: always\n"
        f"    timeout: {timeout}\n"
        if writer
        else ""
    )
    config = folder / "tools.yaml"
    config.write_text(
        f"transport: {{type: http, stateless: {json.dumps(stateless)}, "
        "max_connections_per_client: null}\n"
        f"lock: {{url: 'redis://127.0.0.1:{redis_port}/0', name: fleet, lease: {lease}}}\n"
        "servers:\n"
        "  memory:\n"
        "    server: memory-tools\n"
        f"    timeout: {timeout}\n"
        f"    settings: {{memory_dir: {json.dumps(memory_dir)}}}\n" + writer_entry,
        encoding="utf-8",
    )
    return config


@contextmanager
def launchers(base: Path, config: Path, count: int, machines: int = 2) -> Iterator[list[Launched]]:
    """*count* HTTP launchers on *config*, spread over *machines* machine folders."""
    with ExitStack() as stack:
        started = []
        for i in range(count):
            root, env = machine(base, f"machine-{i % machines + 1}")
            started.append(
                stack.enter_context(
                    http_launcher(
                        config, args=(), env=env, cwd=root, errlog=root / f"launcher-{i + 1}.log"
                    )
                )
            )
        yield started


class ConnectClient:
    """A raw stdio MCP client through ``dpt-launch connect URL``: every reply line is kept, by id,
    so a test can check that each call got exactly one answer."""

    def __init__(self, url: str, errlog: Path) -> None:
        with errlog.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "doc_processing_std_tools.launcher.cli", "connect", url],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self.replies: dict[Any, list[dict[str, Any]]] = {}
        self._arrived = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            reply = json.loads(line)
            if "id" in reply and "method" not in reply:
                with self._arrived:
                    self.replies.setdefault(reply["id"], []).append(reply)
                    self._arrived.notify_all()

    def send(self, payload: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(payload).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        self._next += 1
        request_id = self._next
        self.send(message(method, params, id=request_id))
        deadline = time.monotonic() + timeout
        with self._arrived:
            while request_id not in self.replies:
                left = deadline - time.monotonic()
                assert left > 0, f"no answer to request {request_id} ({method})"
                self._arrived.wait(left)
            return self.replies[request_id][0]

    def initialize(self) -> None:
        reply = self.request("initialize", initialize_params("fleet"))
        assert "result" in reply, reply
        self.send(message("notifications/initialized"))

    def call(self, tool: str, arguments: dict[str, Any], timeout: float = 60) -> tuple[bool, str]:
        """(ok, text) of one tool call: ok when neither a JSON-RPC error nor isError."""
        reply = self.request("tools/call", {"name": tool, "arguments": arguments}, timeout)
        if "error" in reply:
            return False, str(reply["error"].get("message"))
        result = reply["result"]
        text = "".join(block.get("text", "") for block in result.get("content", []))
        return not result.get("isError", False), text

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
