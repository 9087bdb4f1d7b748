"""dpt-launch against a direct connection and the aggregators a user would pick instead.

The peers: fastmcp's own proxy (``create_proxy`` over an ``MCPConfig``, connected once and
served as ``fastmcp run`` serves a server script), magg and mcp-hub (Node). Each mounts the
same three reference servers (server-everything, server-filesystem, server-memory); the same
client (the official ``mcp`` one) talks to every one of them. The peers are installed into
``.bench-peers/`` (git-ignored; pinned versions: :data:`NPM_PACKAGES`, :data:`MAGG`), never into
the project's environment: ``npm install --prefix`` for the Node ones, a virtual environment of
its own for magg (which needs Python >= 3.12 and fastmcp < 4). fastmcp's proxy runs on the
project's own fastmcp.

Rows (each the median of interleaved rounds, every peer open at once):

- stdio: sequential ``echo`` p50; 16 concurrent callers (calls/s); a 5 MB ``read_text_file``;
- HTTP: the same ``echo`` p50 and concurrent calls/s (direct: server-everything's own
  streamable HTTP endpoint; mcp-hub serves MCP over SSE only, so its client is the SDK's SSE one);
- start to the first complete ``tools/list`` with the three servers (direct: the three started
  in parallel, each initialized and listed; over HTTP only server-everything serves HTTP);
- the first ``tools/list`` when a fourth server hangs on ``initialize`` (capped);
- PSS of the process tree (``/proc/*/smaps_rollup``) after the calls; beside the HTTP peers,
  the floors: bare Python processes that serve nothing (``FLOORS``);
- the server children still running a few seconds after the aggregator is SIGKILLed (what
  dpt-launch's shim per child is there for).

dpt-launch runs twice over HTTP: as configured by default (``sessions: per_client``: each HTTP
client has children of its own, isolated from other clients' state, issue 34) and as
``dpt-launch shared`` (``sessions: shared`` on every server: one child per server for every
client, the peers' semantics). Over stdio the two are the same (the one client's session is the
launcher's own), so that column has no stdio figures.

A peer that cannot run here gets no figure (``n/a``) and the reason is printed and kept in the
section's note. Run: ``python benchmarks/peers.py [--quick] [--report]``; ``run.py --only peers``.
Figures are provisional on a shared machine: read the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))  # tests/ holds the helpers benchmarks share
from report import Section, print_figures, write_report  # noqa: E402
from run import precompile_package  # noqa: E402

from helpers.processes import alive, child_pids, cmdline, descendant_pids, started_at  # noqa: E402

PY = sys.executable
PEERS_DIR = REPO / ".bench-peers"
NODE_DIR = PEERS_DIR / "node"
MAGG_DIR = PEERS_DIR / "magg"
MAGG = "magg==1.3.0"
MAGG_PYTHONS = ("python3.13", "python3.12", "/root/.pyenv/versions/3.13.0/bin/python3.13")
NPM_PACKAGES = (
    "mcp-hub@4.2.1",
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@modelcontextprotocol/server-filesystem@2026.8.31",
    "@modelcontextprotocol/server-memory@2026.8.31",
)
SHARED = "dpt-launch shared"  # every server with sessions: shared (HTTP only)
PEERS = ("direct", "dpt-launch", SHARED, "fastmcp proxy", "magg", "mcp-hub")
SAME_OVER_STDIO = "over stdio sessions: shared is dpt-launch's default column (one client)"
CONCURRENT = 16
BIG_FILE_BYTES = 5 * 1024 * 1024
HUNG_CAP_S = 15.0
ORPHAN_WAIT_S = 5.0  # how long a killed aggregator's server children get to go
SERVER_MARKER = "/@modelcontextprotocol/server-"  # in the command line of each server child
HELPER = "sleep 86399"  # a server's own helper process, which never reads the protocol's pipe
OPEN_TIMEOUT_S = 60.0
HANG = "import sys\nsys.stdin.buffer.read()\n"  # never answers initialize

FASTMCP_PROXY = """\
import asyncio, json, sys
from fastmcp import Client
from fastmcp.server import create_proxy

async def main() -> None:
    config = json.load(open(sys.argv[1]))
    client = Client(config)
    async with client:  # connected once: fastmcp reconnects per request otherwise
        proxy = create_proxy(client)
        if sys.argv[2] == "stdio":
            await proxy.run_async("stdio", show_banner=False)
        else:
            await proxy.run_async("http", host="127.0.0.1", port=int(sys.argv[3]),
                                  show_banner=False, log_level="warning")

asyncio.run(main())
"""


# -- installing the peers -------------------------------------------------------------------


def _node_script(package: str, script: str) -> Path:
    return NODE_DIR / "node_modules" / package / script


def node_servers() -> dict[str, Path]:
    return {
        "everything": _node_script("@modelcontextprotocol/server-everything", "dist/index.js"),
        "filesystem": _node_script("@modelcontextprotocol/server-filesystem", "dist/index.js"),
        "memory": _node_script("@modelcontextprotocol/server-memory", "dist/index.js"),
        "mcp-hub": _node_script("mcp-hub", "dist/cli.js"),
    }


def install() -> dict[str, str]:
    """Install what is missing into ``.bench-peers/``: peer -> why it cannot run (none: all ran)."""
    problems: dict[str, str] = {}
    PEERS_DIR.mkdir(exist_ok=True)
    (PEERS_DIR / ".gitignore").write_text("*\n")
    if not all(path.exists() for path in node_servers().values()):
        done = subprocess.run(
            ["npm", "install", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund", *NPM_PACKAGES],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            why = f"npm install failed: {done.stderr.strip().splitlines()[-1:]}"
            return {peer: why for peer in PEERS}
    magg = MAGG_DIR / "bin" / "magg"
    if not magg.exists():
        python = next((p for p in MAGG_PYTHONS if _python_at_least(p, (3, 12))), None)
        if python is None:
            problems["magg"] = "magg 1.3.0 needs Python >= 3.12; none found"
        else:
            subprocess.run([python, "-m", "venv", str(MAGG_DIR)], check=True)
            done = subprocess.run(
                [str(MAGG_DIR / "bin" / "pip"), "install", "-q", MAGG],
                capture_output=True,
                text=True,
            )
            if done.returncode:
                problems["magg"] = f"pip install {MAGG} failed"
    return problems


def _python_at_least(python: str, version: tuple[int, int]) -> bool:
    try:
        done = subprocess.run(
            [python, "-c", f"import sys; print(sys.version_info[:2] >= {version!r})"],
            capture_output=True,
            text=True,
        )
    except OSError:
        return False
    return done.stdout.strip() == "True"


# -- the set-up each peer runs on -----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Bench:
    """The folder, the reference servers' commands and the configs of every peer."""

    root: Path
    hung: bool = False  # a fourth server that hangs on initialize
    helper: bool = False  # server-memory's shell starts a helper process first (HELPER)

    def __post_init__(self) -> None:
        self.files = self.root / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self.big = self.files / "big.txt"
        if not self.big.exists():
            line = "0123456789abcdef" * 4 + "\n"
            self.big.write_text(line * (BIG_FILE_BYTES // len(line)))
        self.hang = self.root / "hang.py"
        self.hang.write_text(HANG)
        self.env = {
            **os.environ,
            "HOME": str(self.root / "home"),
            "XDG_STATE_HOME": str(self.root / "state"),
            "XDG_DATA_HOME": str(self.root / "data"),
            "FASTMCP_LOG_LEVEL": "WARNING",
            "MEMORY_FILE_PATH": str(self.root / "memory.jsonl"),
        }
        (self.root / "home").mkdir(exist_ok=True)

    def servers(self) -> dict[str, tuple[str, list[str]]]:
        """name -> (command, args) of the servers every peer mounts."""
        scripts = node_servers()
        found = {
            "everything": ("node", [str(scripts["everything"])]),
            "filesystem": ("node", [str(scripts["filesystem"]), str(self.files)]),
            "memory": ("node", [str(scripts["memory"])]),
        }
        if self.helper:  # as a server that runs a browser or a language server beside it
            found["memory"] = ("sh", ["-c", f'{HELPER} & exec node "$0"', str(scripts["memory"])])
        if self.hung:
            found["hung"] = (PY, [str(self.hang)])
        return found

    def dpt_config(self, port: int | None, shared: bool = False) -> Path:
        """dpt-launch's config; *shared*: every server with ``sessions: shared``."""
        lines = []
        if port is not None:
            lines += ["transport:", "  type: http", f"  port: {port}"]
        lines.append("servers:")
        for name, (command, args) in self.servers().items():
            lines += [f"  {name}:", f"    command: {command}", f"    args: {json.dumps(args)}"]
            if shared:
                lines.append("    sessions: shared")
        kind = f"{port or 'stdio'}{'-shared' if shared else ''}{'-hung' if self.hung else ''}"
        path = self.root / f"dpt-{kind}.yaml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def mcp_config(self, name: str, extra: dict[str, Any] | None = None) -> Path:
        """The servers in the ``mcpServers`` JSON fastmcp and mcp-hub read."""
        servers = {
            key: {
                "command": command,
                "args": args,
                "env": {"MEMORY_FILE_PATH": self.env["MEMORY_FILE_PATH"]},
                **(extra or {}),
            }
            for key, (command, args) in self.servers().items()
        }
        path = self.root / name
        path.write_text(json.dumps({"mcpServers": servers}))
        return path

    def magg_config(self) -> Path:
        servers = {
            key: {"name": key, "source": "local", "command": command, "args": args}
            for key, (command, args) in self.servers().items()
        }
        path = self.root / f"magg{'-hung' if self.hung else ''}" / "config.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"servers": servers}))
        return path

    def proxy_script(self) -> Path:
        path = self.root / "fastmcp_proxy.py"
        path.write_text(FASTMCP_PROXY)
        return path


@dataclass
class Started:
    """How to reach one peer: a stdio command, or an HTTP command with its URL."""

    command: list[str]
    url: str | None = None  # HTTP
    sse: bool = False  # mcp-hub: MCP over SSE
    env: dict[str, str] = field(default_factory=dict)  # on top of the bench's
    ready: str | None = None  # a URL answering 200 with "ready" in it once the peer serves
    cwd: Path | None = None  # the peer's working directory (None: this process's)


def stdio_start(peer: str, bench: Bench, server: str = "everything") -> Started | str:
    """The stdio command of *peer* (direct: *server* alone), or why it has none."""
    if peer == "direct":
        command, args = bench.servers()[server]
        return Started([command, *args])
    if peer == "dpt-launch":
        config = bench.dpt_config(None)
        return Started([PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)])
    if peer == SHARED:
        return SAME_OVER_STDIO
    if peer == "fastmcp proxy":
        config = bench.mcp_config("fastmcp-stdio.json")
        return Started([PY, str(bench.proxy_script()), str(config), "stdio"])
    if peer == "magg":
        config = bench.magg_config()
        return Started(
            [str(MAGG_DIR / "bin" / "magg"), "--config", str(config), "serve", "--no-banner"]
        )
    return "mcp-hub serves MCP over HTTP (SSE) only"


def http_start(peer: str, bench: Bench, port: int) -> Started | str:
    if peer == "direct":
        return Started(
            ["node", str(node_servers()["everything"]), "streamableHttp"],
            f"http://127.0.0.1:{port}/mcp",
            env={"PORT": str(port)},
        )
    if peer in ("dpt-launch", SHARED):
        config = bench.dpt_config(port, shared=peer == SHARED)
        return Started(
            [PY, "-m", "doc_processing_std_tools.launcher.cli", "--config", str(config)],
            f"http://127.0.0.1:{port}/mcp",
        )
    if peer == "fastmcp proxy":
        config = bench.mcp_config(f"fastmcp-http{'-hung' if bench.hung else ''}.json")
        return Started(
            [PY, str(bench.proxy_script()), str(config), "http", str(port)],
            f"http://127.0.0.1:{port}/mcp",
        )
    if peer == "magg":
        config = bench.magg_config()
        return Started(
            [
                str(MAGG_DIR / "bin" / "magg"),
                "--config",
                str(config),
                "serve",
                "--http",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-banner",
            ],
            f"http://127.0.0.1:{port}/mcp/",
        )
    config = bench.mcp_config(f"mcp-hub{'-hung' if bench.hung else ''}.json")
    return Started(
        ["node", str(node_servers()["mcp-hub"]), "--port", str(port), "--config", str(config)],
        f"http://127.0.0.1:{port}/mcp",
        sse=True,
        ready=f"http://127.0.0.1:{port}/api/health",  # its port opens before its MCP endpoint
    )


# -- one connection -----------------------------------------------------------------------


@dataclass
class Peer:
    """One running peer and the client's session on it."""

    session: ClientSession
    pid: int
    tools: list[str] = field(default_factory=list)

    def tool(self, suffix: str) -> str:
        return next(name for name in self.tools if name == suffix or name.endswith("_" + suffix))


@contextlib.asynccontextmanager
async def connected(started: Started, env: dict[str, str], errlog: Any) -> AsyncIterator[Peer]:
    """*started* running, initialized and listed once."""
    if started.url is None:
        params = StdioServerParameters(
            command=started.command[0], args=started.command[1:], env=env, cwd=started.cwd
        )
        before = set(child_pids(os.getpid()))
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(OPEN_TIMEOUT_S):
                await session.initialize()
                listed = await session.list_tools()
            pids = sorted(set(child_pids(os.getpid())) - before)
            yield Peer(session, pids[-1] if pids else 0, [tool.name for tool in listed.tools])
        return
    proc = subprocess.Popen(
        started.command,
        env={**env, **started.env},
        stdout=errlog,
        stderr=errlog,
        cwd=started.cwd,
    )
    try:
        await _until_listening(started.url, proc)
        if started.ready:
            await _until_ready(started.ready, proc)
        async with contextlib.AsyncExitStack() as stack:
            if started.sse:
                read, write = await stack.enter_async_context(sse_client(started.url))
            else:
                read, write, *_ = await stack.enter_async_context(
                    streamable_http_client(started.url)
                )
            session = await stack.enter_async_context(ClientSession(read, write))
            with anyio.fail_after(OPEN_TIMEOUT_S):
                await session.initialize()
                listed = await session.list_tools()
            yield Peer(session, proc.pid, [tool.name for tool in listed.tools])
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            for pid in descendant_pids(proc.pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)
            proc.kill()
            proc.wait()


async def _until_listening(url: str, proc: subprocess.Popen[Any]) -> None:
    """Until *url*'s port accepts connections (the peer's first log lines vary)."""
    host_port = url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.split(":")
    with anyio.fail_after(OPEN_TIMEOUT_S):
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[:3]} exited with {proc.returncode}")
            try:
                stream = await anyio.connect_tcp(host, int(port))
            except OSError:
                await anyio.sleep(0.02)
                continue
            await stream.aclose()
            return


async def _until_ready(url: str, proc: subprocess.Popen[Any]) -> None:
    async with httpx2.AsyncClient() as client:
        with anyio.fail_after(OPEN_TIMEOUT_S):
            while proc.poll() is None:
                with contextlib.suppress(httpx2.HTTPError):
                    reply = await client.get(url)
                    if reply.status_code == 200 and '"ready"' in reply.text:
                        return
                await anyio.sleep(0.02)
    raise RuntimeError(f"{proc.args[:3]} exited with {proc.returncode}")


# -- workloads --------------------------------------------------------------------------


async def echo_p50(peer: Peer, calls: int) -> float:
    name = peer.tool("echo")
    samples = []
    for i in range(calls):
        start = time.perf_counter()
        result = await peer.session.call_tool(name, {"message": f"m{i}"})
        samples.append(time.perf_counter() - start)
        if result.is_error:
            raise RuntimeError(f"echo failed: {result}")
    return statistics.median(samples) * 1000


async def concurrent_rate(peer: Peer, per_caller: int) -> float:
    name = peer.tool("echo")

    async def caller(index: int) -> None:
        for i in range(per_caller):
            result = await peer.session.call_tool(name, {"message": f"c{index}-{i}"})
            if result.is_error:
                raise RuntimeError(f"echo failed: {result}")

    start = time.perf_counter()
    async with anyio.create_task_group() as group:
        for index in range(CONCURRENT):
            group.start_soon(caller, index)
    return CONCURRENT * per_caller / (time.perf_counter() - start)


async def big_read_s(peer: Peer, path: Path) -> float:
    name = peer.tool("read_text_file")
    start = time.perf_counter()
    result = await peer.session.call_tool(name, {"path": str(path)})
    elapsed = time.perf_counter() - start
    text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    if result.is_error or len(text) < BIG_FILE_BYTES // 2:
        raise RuntimeError(f"read_text_file failed: {text[:200]}")
    return elapsed


def pss_mb(pid: int) -> float:
    """PSS of *pid* alone, in MB (0 when it is gone)."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0
    lines = (line for line in rollup.splitlines() if line.startswith("Pss:"))
    return sum(int(line.split()[1]) for line in lines) / 1024


def tree_pss_mb(pid: int) -> float:
    """PSS of *pid* and every process under it, in MB."""
    return sum(pss_mb(each) for each in [pid, *descendant_pids(pid)])


def tree_parts(pid: int) -> dict[str, float]:
    """dpt-launch's tree by part (PSS, MB): the launcher process, each shim (the stdlib-only
    ``child.py`` between the launcher and a command; mean), each server child (mean), and how
    many server children there are."""
    shims, servers = [], []
    for each in descendant_pids(pid):
        try:
            argv = Path(f"/proc/{each}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        is_shim = any(arg.endswith(b"/external/child.py") for arg in argv[:4])
        (shims if is_shim else servers).append(pss_mb(each))
    return {
        "pss launcher": pss_mb(pid),
        "pss shim": statistics.mean(shims) if shims else math.nan,
        "pss server": statistics.mean(servers) if servers else math.nan,
        "children": float(len(servers)),
    }


# -- start-up -----------------------------------------------------------------------------


async def first_list_s(started: Started, env: dict[str, str], cap: float) -> float:
    """Spawn to the first complete ``tools/list`` answer; *cap* when none came by then."""
    start = time.perf_counter()
    with open(os.devnull, "w") as errlog:
        with anyio.move_on_after(cap) as scope:
            async with connected(started, env, errlog):
                return time.perf_counter() - start
    if scope.cancelled_caught:
        return cap
    raise AssertionError("unreachable")


async def direct_first_list_s(bench: Bench, env: dict[str, str]) -> float:
    """The three servers started in parallel, each initialized and listed."""
    start = time.perf_counter()
    ends: list[float] = []

    async def one(server: str) -> None:
        started = stdio_start("direct", bench, server)
        assert isinstance(started, Started)
        with open(os.devnull, "w") as errlog:
            async with connected(started, env, errlog):
                ends.append(time.perf_counter())

    async with anyio.create_task_group() as group:
        for server in ("everything", "filesystem", "memory"):
            group.start_soon(one, server)
    return max(ends) - start


# -- the rounds ---------------------------------------------------------------------------


@dataclass
class Samples:
    rows: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)  # "row | peer" or peer -> why not

    def refuse(self, where: str, why: str) -> None:
        if where not in self.reasons:
            print(f"  not measured: {where}: {why}", flush=True)
            self.reasons[where] = why

    def add(self, row: str, peer: str, value: float) -> None:
        self.rows.setdefault(row, {}).setdefault(peer, []).append(value)


async def guarded(samples: Samples, row: str, peer: str, measure: Awaitable[float]) -> None:
    try:
        samples.add(row, peer, await measure)
    except Exception as exc:  # a peer failing a row is a finding, not the end of the run
        samples.refuse(f"{row} | {peer}", f"{type(exc).__name__}: {exc}"[:160])


ROWS = {
    "stdio echo": "stdio, sequential echo p50 (ms)",
    "stdio concurrent": f"stdio, {CONCURRENT} concurrent callers (calls/s)",
    "stdio read": "stdio, 5 MB read_text_file (s)",
    "http echo": "HTTP, sequential echo p50 (ms)",
    "http concurrent": f"HTTP, {CONCURRENT} concurrent callers (calls/s)",
    "first list stdio": "start to first tools/list, 3 servers, stdio (s)",
    "first list http": "start to first tools/list, 3 servers, HTTP (s)",
    "hung": f"first tools/list, a 4th server hung on initialize (s, capped at {HUNG_CAP_S:g})",
    "stdio pss": "PSS of the process tree after the stdio calls (MB)",
    "http pss": "PSS of the process tree after the HTTP calls (MB)",
    "orphans": f"processes under the aggregator left running {ORPHAN_WAIT_S:g} s after its SIGKILL "
    "(count)",
    "orphans helper": f"processes under the aggregator left running {ORPHAN_WAIT_S:g} s after its "
    "SIGKILL, one server starting a helper process of its own (count)",
}
# dpt-launch's tree after the HTTP calls, by part (one client connected)
PARTS = {
    "http pss launcher": "PSS after the HTTP calls, the launcher process (MB)",
    "http pss shim": "PSS after the HTTP calls, each shim (MB)",
    "http pss server": "PSS after the HTTP calls, each server child (MB)",
    "http children": "server children after the HTTP calls, one client (count)",
}
# What a Python process costs before it does anything, measured beside the HTTP peers (same
# pages shared): what no Python aggregator can go below.
READY_THEN_WAIT = "import sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"
SDK_IMPORTS = (
    "from fastmcp import Client; from fastmcp.server import create_proxy; "
    "import fastmcp.client.transports, fastmcp.server.http, uvicorn, "
    "mcp.server.streamable_http_manager; "
)
FLOORS = {
    "PSS after the HTTP calls, a bare python -I -S, a shim's floor (MB)": [
        PY,
        "-I",
        "-S",
        "-c",
        READY_THEN_WAIT,
    ],
    "PSS after the HTTP calls, a bare python importing mcp.types alone (MB)": [
        PY,
        "-c",
        "import mcp.types; " + READY_THEN_WAIT,
    ],
    "PSS after the HTTP calls, a bare python importing what fastmcp's proxy serves with (MB)": [
        PY,
        "-c",
        SDK_IMPORTS + READY_THEN_WAIT,
    ],
}


async def calls_rounds(
    bench: Bench, samples: Samples, rounds: int, quick: bool, http: bool
) -> None:
    """Every peer open at once over stdio (or HTTP), the workloads in rounds, order reversed."""
    echo_calls = 100 if quick else 300
    per_caller = 10 if quick else 30
    prefix = "http" if http else "stdio"
    async with contextlib.AsyncExitStack() as stack:
        errlog = stack.enter_context((bench.root / f"peers-{prefix}.log").open("w"))
        peers: dict[str, Peer] = {}
        files: dict[str, Peer] = {}
        for name in PEERS:
            if name in samples.reasons:
                continue
            started = http_start(name, bench, free_port()) if http else stdio_start(name, bench)
            if isinstance(started, str):
                samples.refuse(f"{prefix} | {name}", started)
                continue
            try:
                peers[name] = await stack.enter_async_context(connected(started, bench.env, errlog))
                if name == "direct" and not http:  # the 5 MB read goes to server-filesystem
                    fs = stdio_start("direct", bench, "filesystem")
                    assert isinstance(fs, Started)
                    files[name] = await stack.enter_async_context(connected(fs, bench.env, errlog))
                else:
                    files[name] = peers[name]
            except Exception as exc:
                samples.refuse(
                    f"{prefix} | {name}", f"could not start: {type(exc).__name__}: {exc}"[:160]
                )
        for name, peer in list(peers.items()):  # warm up; a peer that cannot echo is left out
            try:
                await echo_p50(peer, 20)
            except Exception as exc:
                samples.refuse(f"{prefix} | {name}", f"{type(exc).__name__}: {exc}"[:160])
                del peers[name]
        order = list(peers)
        for _ in range(rounds):
            for name in order:
                peer = peers[name]
                await guarded(samples, f"{prefix} echo", name, echo_p50(peer, echo_calls))
                await guarded(
                    samples, f"{prefix} concurrent", name, concurrent_rate(peer, per_caller)
                )
                if not http:
                    await guarded(samples, "stdio read", name, big_read_s(files[name], bench.big))
            order.reverse()
        for name, peer in peers.items():
            if name != "direct":  # (the servers alone, not all three: nothing to compare)
                samples.add(f"{prefix} pss", name, tree_pss_mb(peer.pid))
            if http and name in ("dpt-launch", SHARED):
                for part, value in tree_parts(peer.pid).items():
                    samples.add(f"http {part}", name, value)
        if http:
            for title, command in FLOORS.items():
                samples.add(title, "floor", floor_pss_mb(command, bench.env))


def floor_pss_mb(command: list[str], env: dict[str, str]) -> float:
    """PSS of *command* once it says it is ready (it then waits on its stdin)."""
    proc = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline() != b"ready\n":
            raise RuntimeError(f"{command[-1][:60]!r} did not start")
        return pss_mb(proc.pid)
    finally:
        proc.kill()
        proc.wait()


async def startup_rounds(bench: Bench, samples: Samples, rounds: int) -> None:
    order = [name for name in PEERS if name not in samples.reasons]
    for _ in range(rounds):
        for name in order:
            await guarded(samples, "first list stdio", name, _first_list(bench, name, False))
            await guarded(samples, "first list http", name, _first_list(bench, name, True))
        order.reverse()


async def _first_list(bench: Bench, name: str, http: bool) -> float:
    if name == "direct" and not http:
        return await direct_first_list_s(bench, bench.env)
    started = http_start(name, bench, free_port()) if http else stdio_start(name, bench)
    if isinstance(started, str):
        raise LookupError(started)
    return await first_list_s(started, bench.env, OPEN_TIMEOUT_S)


def aggregators(bench: Bench, samples: Samples) -> Iterator[tuple[str, Started]]:
    """Each aggregator still in the run (not the shared column: over stdio it is dpt-launch's),
    started over stdio, else over HTTP."""
    for name in PEERS[1:]:
        if name == SHARED or name in samples.reasons:
            continue
        started = stdio_start(name, bench)
        if isinstance(started, str):
            started = http_start(name, bench, free_port())
        assert isinstance(started, Started)
        yield name, started


async def hung_round(bench: Bench, samples: Samples) -> None:
    hung = Bench(bench.root, hung=True)
    samples.refuse(f"hung | {SHARED}", SAME_OVER_STDIO)
    for name, started in aggregators(hung, samples):
        await guarded(samples, "hung", name, first_list_s(started, hung.env, HUNG_CAP_S))


async def orphans_rounds(bench: Bench, samples: Samples, rounds: int) -> None:
    """What the shims buy: each aggregator (over stdio, else HTTP) SIGKILLed with its three
    server children up; how many processes under it still run :data:`ORPHAN_WAIT_S` later.
    Then the same with one server that starts a helper process of its own."""
    runs = (("orphans", bench), ("orphans helper", Bench(bench.root / "helper", helper=True)))
    for row, _ in runs:
        samples.refuse(f"{row} | {SHARED}", SAME_OVER_STDIO)
    for _ in range(rounds):
        for row, where in runs:
            for name, started in aggregators(where, samples):
                await guarded(samples, row, name, processes_left(started, where))


@contextlib.contextmanager
def _silenced(logger: logging.Logger) -> Iterator[None]:
    was, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = was


async def processes_left(started: Started, bench: Bench) -> float:
    """SIGKILL the aggregator once its server children (and the helper) run; the count of the
    processes that were under it still running when all are gone or :data:`ORPHAN_WAIT_S` has
    passed (survivors are then killed)."""
    children: list[tuple[int, int]] = []  # (pid, start time): a reused pid is not a survivor
    killed = False

    def up(pids: list[int]) -> bool:
        lines = [cmdline(pid) for pid in pids]
        servers = sum(line.startswith("node ") and SERVER_MARKER in line for line in lines)
        return servers == len(bench.servers()) and (
            not bench.helper or any(line.startswith(HELPER) for line in lines)
        )

    def running() -> list[int]:
        return [pid for pid, born in children if alive(pid) and started_at(pid) == born]

    sse_log = logging.getLogger("mcp.client.sse")  # logs the killed peer's cut stream
    with (
        (bench.root / "peers-orphans.log").open("w") as errlog,
        contextlib.suppress(Exception),  # after the kill the session ends with its peer
        _silenced(sse_log),
    ):
        async with connected(started, bench.env, errlog) as peer:
            with anyio.fail_after(OPEN_TIMEOUT_S):
                while not up(pids := descendant_pids(peer.pid)):
                    await anyio.sleep(0.05)
            children[:] = [(pid, started_at(pid)) for pid in pids]
            os.kill(peer.pid, signal.SIGKILL)
            killed = True
            with anyio.move_on_after(ORPHAN_WAIT_S):
                while running():
                    await anyio.sleep(0.05)
    if not killed:
        raise RuntimeError(f"its {len(bench.servers())} server children did not all start")
    left = running()
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return float(len(left))


PARTS_OF_RUN = ("stdio", "http", "startup", "hung", "orphans")


async def measure(
    quick: bool, root: Path, only: tuple[str, ...] = PARTS_OF_RUN, peers: tuple[str, ...] = PEERS
) -> Samples:
    """The run's *only* parts, for *peers* (a peer left out is noted as such, not measured)."""
    samples = Samples()
    for peer, why in install().items():
        samples.reasons[peer] = why
    for peer in PEERS:
        if peer not in peers and peer != "direct":
            samples.reasons.setdefault(peer, "left out of this run (--peers)")
    precompile_package()
    bench = Bench(root)
    rounds = 3 if quick else 5
    if "stdio" in only:
        await calls_rounds(bench, samples, rounds, quick, http=False)
    if "http" in only:
        await calls_rounds(bench, samples, rounds, quick, http=True)
    if "startup" in only:
        await startup_rounds(bench, samples, 1 if quick else 3)
    if "hung" in only:
        await hung_round(bench, samples)
    if "orphans" in only:
        await orphans_rounds(bench, samples, 1 if quick else 3)
    return samples


def figure_name(row: str, peer: str) -> str:
    title = {**ROWS, **PARTS}[row]
    head, unit = title.rsplit(" (", 1)
    return f"{head}: {peer} ({unit}"


LAST_NOTE: list[str] = []


def figures(
    quick: bool = False, only: tuple[str, ...] = PARTS_OF_RUN, peers: tuple[str, ...] = PEERS
) -> dict[str, float]:
    """Every row x peer (NaN where a peer did not run the row), plus the ratios that matter."""
    with tempfile.TemporaryDirectory(prefix="dpt-peers-") as tmp:
        samples = anyio.run(measure, quick, Path(tmp), only, peers)
    found: dict[str, float] = {}
    for row in ROWS:
        for peer in PEERS:
            values = samples.rows.get(row, {}).get(peer)
            found[figure_name(row, peer)] = statistics.median(values) if values else math.nan
    for row in PARTS:
        for peer in ("dpt-launch", SHARED):
            values = samples.rows.get(row, {}).get(peer)
            found[figure_name(row, peer)] = statistics.median(values) if values else math.nan

    for title in FLOORS:
        values = samples.rows.get(title, {}).get("floor")
        found[title] = statistics.median(values) if values else math.nan

    def ratio(row: str, a: str, b: str) -> float:
        return found[figure_name(row, a)] / found[figure_name(row, b)]

    found["HTTP calls/s dpt-launch / direct ratio (target >= 1.0)"] = ratio(
        "http concurrent", "dpt-launch", "direct"
    )
    found["HTTP echo p50 dpt-launch / direct ratio (target <= 1.0)"] = ratio(
        "http echo", "dpt-launch", "direct"
    )
    found["HTTP calls/s dpt-launch / mcp-hub ratio (target >= 1.0)"] = ratio(
        "http concurrent", "dpt-launch", "mcp-hub"
    )
    LAST_NOTE[:] = [f"{where}: {why}" for where, why in sorted(samples.reasons.items())]
    for line in LAST_NOTE:
        print(f"  not measured: {line}")
    return found


def note() -> str | None:
    """Why some cells of the last run have no figure."""
    return "; ".join(LAST_NOTE) or None


def table(found: dict[str, float]) -> str:
    lines = ["| workload | " + " | ".join(PEERS) + " |", "|---|" + "---:|" * len(PEERS)]
    for row, title in ROWS.items():
        cells = []
        for peer in PEERS:
            value = found[figure_name(row, peer)]
            cells.append(
                "—" if value != value else ("never" if math.isinf(value) else f"{value:,.2f}")
            )
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    parser.add_argument(
        "--report", action="store_true", help="write docs/performance/figures.json and the pages"
    )
    parser.add_argument(
        "--only",
        default=",".join(PARTS_OF_RUN),
        help=f"comma-separated parts of the run ({', '.join(PARTS_OF_RUN)}); not with --report",
    )
    parser.add_argument(
        "--peers",
        default=",".join(PEERS),
        help="comma-separated peers to run (direct always runs); not with --report",
    )
    args = parser.parse_args()
    only = tuple(part.strip() for part in args.only.split(",") if part.strip())
    peers = tuple(peer.strip() for peer in args.peers.split(",") if peer.strip())
    unknown = [part for part in only if part not in PARTS_OF_RUN] + [
        peer for peer in peers if peer not in PEERS
    ]
    if unknown:
        parser.error(f"unknown part or peer {unknown[0]!r}: parts {PARTS_OF_RUN}, peers {PEERS}")
    if args.report and (only != PARTS_OF_RUN or set(peers) != set(PEERS)):
        parser.error("--report writes the whole table: drop --only and --peers")
    start = time.perf_counter()
    found = figures(args.quick, only, peers)
    print(table(found))
    section = Section("peers", "peers (benchmarks/peers.py)", found, note())
    section.seconds = time.perf_counter() - start
    print_figures(section)
    if args.report:
        from figures_file import FIGURES_FILE

        write_report([section], FIGURES_FILE, quick=args.quick, rounds=3 if args.quick else 5)


if __name__ == "__main__":
    main()
