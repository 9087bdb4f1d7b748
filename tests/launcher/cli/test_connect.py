"""``dpt-launch connect``: real stdio clients through real bridges to a real HTTP daemon."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import MCPError

from helpers.launch import launcher_command, text_of
from helpers.rpc import initialize

SPAWN_TIMEOUT = 60
DOWN_TEXT = "the dpt-launch daemon at {url} is not reachable: "

PROBE_SERVER = '''\
from pathlib import Path

import anyio
import mcp_types
from fastmcp import Context, FastMCP

server = FastMCP("probe")


@server.tool
async def client_roots(ctx: Context) -> str:
    """The roots the connected client reports."""
    result = await ctx.session.list_roots()
    return ",".join(str(root.uri) for root in result.roots)


@server.tool
async def wait_for_cancel(marker: str, ctx: Context) -> str:
    """Waits until cancelled; the marker file says it started, then that it was cancelled."""
    Path(marker).write_text("started")
    try:
        await anyio.sleep(60)
    except anyio.get_cancelled_exc_class():
        Path(marker).write_text("cancelled")
        raise
    return "not cancelled"


@server.tool
async def announce(ctx: Context) -> str:
    """Tells the client its tool list changed."""
    await ctx.send_notification(mcp_types.ToolListChangedNotification())
    return "announced"
'''


@pytest.fixture
def daemon_config(tmp_path: Path) -> Path:
    (tmp_path / "root").mkdir()
    (tmp_path / "probe_server.py").write_text(PROBE_SERVER, encoding="utf-8")
    config = tmp_path / "tools.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            servers:
              memory:
                server: memory-tools
                settings: {memory_dir: ./memory}
              filesystem:
                settings: {roots: [./root]}
              probe:
                module: probe_server:server
            """
        ),
        encoding="utf-8",
    )
    return config


class Daemon:
    """``dpt-launch --config F --transport http`` as a process; restartable on its port."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.port = 0
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = config.parent / "daemon.log"

    def start(self) -> None:
        command = [*launcher_command(), "--config", str(self.config), "--transport", "http"]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [*command, "--port", str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=self.config.parent,
            )
        deadline = time.monotonic() + SPAWN_TIMEOUT
        while time.monotonic() < deadline:
            match = re.search(
                rb"serving \d+ tools on (http://127\.0\.0\.1:(\d+)/mcp)", self.log.read_bytes()
            )
            if match:
                self.url, self.port = match.group(1).decode(), int(match.group(2))
                return
            assert self.proc.poll() is None, self.stderr()
            time.sleep(0.05)
        raise AssertionError(f"the daemon did not start: {self.stderr()}")

    def stderr(self) -> str:
        return self.log.read_text("utf-8", "replace") if self.log.exists() else ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def daemon(daemon_config: Path) -> Iterator[Daemon]:
    running = Daemon(daemon_config)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def connect_command(url: str, *extra: str) -> list[str]:
    return [*launcher_command(), "connect", url, *extra]


@asynccontextmanager
async def bridged(
    url: str,
    *extra: str,
    env: dict[str, str] | None = None,
    handshake: bool = True,
    **session: Any,
) -> AsyncIterator[Any]:
    """An official mcp ClientSession over stdio to ``dpt-launch connect url`` (initialized
    unless *handshake* is false)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command = connect_command(url, *extra)
    params = StdioServerParameters(
        command=command[0], args=command[1:], env={**os.environ, **(env or {})}
    )
    with tempfile.TemporaryFile("w+") as errlog:
        with anyio.fail_after(SPAWN_TIMEOUT):
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write, **session) as client,
            ):
                if handshake:
                    await client.initialize()
                yield client


@pytest.mark.slow
async def test_every_kind_of_request_goes_through(daemon: Daemon) -> None:
    root = daemon.config.parent / "root"
    async with bridged(daemon.url) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"memory_create", "write_file", "client_roots"} <= names
        created = await client.call_tool("memory_create", {"path": "notes.md", "file_text": "hi\n"})
        assert not created.is_error, text_of(created)
        viewed = await client.call_tool("memory_view", {"path": "notes.md"})
        assert "hi" in text_of(viewed)
        written = await client.call_tool("write_file", {"path": "a.txt", "content": "via bridge"})
        assert not written.is_error, text_of(written)
        assert (root / "a.txt").read_text() == "via bridge"
        read = await client.call_tool("read_text_file", {"path": "a.txt"})
        assert text_of(read) == "via bridge"
        refused = await client.call_tool("read_text_file", {"path": "../tools.yaml"})
        assert refused.is_error  # the daemon's errors come back as they are
        # The built-in servers have no prompts or resources: the list calls must still work.
        assert (await client.list_prompts()).prompts == []
        assert (await client.list_resources()).resources == []
        await client.list_resource_templates()
        await client.send_ping()
    assert (daemon.config.parent / "memory" / "notes.md").read_text() == "hi\n"


@pytest.mark.slow
async def test_roots_notifications_and_cancellation_are_forwarded(
    daemon: Daemon, tmp_path: Path
) -> None:
    import mcp_types

    async def list_roots(context: Any) -> mcp_types.ListRootsResult:
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri="file:///projects/alpha")])

    heard: list[Any] = []

    async def on_message(message: Any) -> None:
        heard.append(message)

    marker = tmp_path / "marker"
    async with bridged(
        daemon.url, list_roots_callback=list_roots, message_handler=on_message
    ) as client:
        roots = await client.call_tool("client_roots", {})
        assert text_of(roots) == "file:///projects/alpha"  # the daemon asked our client

        assert text_of(await client.call_tool("announce", {})) == "announced"
        with anyio.fail_after(10):
            while not any(isinstance(m, mcp_types.ToolListChangedNotification) for m in heard):
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "wait_for_cancel", {"marker": str(marker)})
            with anyio.fail_after(15):
                while not marker.exists():
                    await anyio.sleep(0.05)
            group.cancel_scope.cancel()  # the SDK sends notifications/cancelled
        with anyio.fail_after(15):
            while marker.read_text() != "cancelled":
                await anyio.sleep(0.05)
        # The session is still usable afterwards.
        assert text_of(await client.call_tool("announce", {})) == "announced"


@pytest.mark.slow  # (two bridges and a daemon: a small fleet)
async def test_two_bridges_share_the_daemons_lock(daemon: Daemon) -> None:
    """50 overlapping inserts into one file, 25 through each of two bridges: none is lost."""
    async with bridged(daemon.url) as first, bridged(daemon.url) as second:
        created = await first.call_tool("memory_create", {"path": "log.txt", "file_text": ""})
        assert not created.is_error, text_of(created)
        errors: list[str] = []

        async def insert(client: Any, number: int) -> None:
            result = await client.call_tool(
                "memory_insert",
                {"path": "log.txt", "insert_line": 0, "insert_text": f"line {number}"},
            )
            if result.is_error:
                errors.append(text_of(result))

        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for number in range(50):
                    group.start_soon(insert, first if number % 2 else second, number)
    assert errors == []
    lines = (daemon.config.parent / "memory" / "log.txt").read_text().splitlines()
    assert sorted(lines) == sorted(f"line {n}" for n in range(50))


@pytest.mark.slow  # (a lifecycle test: waits out a real kill, restart or timeout)
async def test_a_daemon_restart_fails_calls_clearly_then_they_work_again(daemon: Daemon) -> None:
    async with bridged(daemon.url) as client:
        ok = await client.call_tool("memory_create", {"path": "a.md", "file_text": "one\n"})
        assert not ok.is_error, text_of(ok)

        daemon.kill()
        for _ in range(2):  # not once by luck: every call while it is down fails the same way
            with anyio.fail_after(10):  # fails, and fast: no hang
                down = await client.call_tool("memory_view", {"path": "a.md"})
            assert down.is_error
            # the words docs/daemon.md quotes, not asyncio's "connect call failed (...)"
            expected = DOWN_TEXT.format(url=daemon.url) + "connection refused; "
            assert text_of(down).startswith(expected), text_of(down)
            assert (
                f"start it with: dpt-launch --config YOUR_CONFIG --transport http --port {daemon.port}"
                in text_of(down)
            )
        with anyio.fail_after(10):
            with pytest.raises(MCPError, match="not reachable"):
                await client.list_tools()  # other requests get a JSON-RPC error with the same text

        daemon.start()  # the same port
        with anyio.fail_after(30):
            back = await client.call_tool("memory_view", {"path": "a.md"})
        assert not back.is_error, text_of(back)
        assert "one" in text_of(back)
        assert "memory_view" in {tool.name for tool in (await client.list_tools()).tools}


@pytest.mark.slow  # (a lifecycle test: waits out a real kill, restart or timeout)
async def test_a_bridge_started_before_the_daemon_heals_when_it_comes_up(
    daemon_config: Path,
) -> None:
    late = Daemon(daemon_config)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        late.port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{late.port}/mcp"
    try:
        async with bridged(url) as client:  # initialize is answered for the absent daemon
            down = await client.call_tool("memory_view", {"path": "."})
            assert text_of(down).startswith(DOWN_TEXT.format(url=url))
            late.start()
            with anyio.fail_after(30):
                back = await client.call_tool("memory_view", {"path": "."})
            assert not back.is_error, text_of(back)
    finally:
        late.stop()


class HeaderCatcher:
    """A one-shot HTTP server on 127.0.0.1 that answers 401 and keeps what it was sent."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/mcp"
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data)
                body = b'{"error": "unauthorized"}'
                conn.sendall(
                    b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\n"
                    b"Content-Type: application/json\r\nConnection: close\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )


@pytest.mark.slow
async def test_the_token_is_sent_as_a_bearer_header_and_never_logged() -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    catcher = HeaderCatcher()
    token = "s3cret-token-value"
    command = connect_command(catcher.url, "--token-env", "DPT_TEST_TOKEN")
    params = StdioServerParameters(
        command=command[0],
        args=command[1:],
        env={**os.environ, "DPT_TEST_TOKEN": token},
    )
    with tempfile.TemporaryFile("w+") as errlog:
        with anyio.fail_after(SPAWN_TIMEOUT):
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                with pytest.raises(MCPError, match="refused our credentials"):
                    await client.initialize()
        errlog.seek(0)
        assert token not in errlog.read()
    catcher.listener.close()
    assert catcher.requests
    assert f"authorization: bearer {token}".encode() in catcher.requests[0].lower()


@pytest.mark.slow
async def test_a_daemon_that_wants_a_token_when_none_was_given_says_how_to_give_one() -> None:
    """No --token-env: the 401 says to add one, not to 'check the token' that was never given."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    catcher = HeaderCatcher()
    command = connect_command(catcher.url)
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    try:
        with tempfile.TemporaryFile("w+") as errlog, anyio.fail_after(SPAWN_TIMEOUT):
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                with pytest.raises(Exception, match="none was sent; add --token-env VAR") as got:
                    await client.initialize()
        assert "check the token" not in str(got.value)
    finally:
        catcher.listener.close()
    assert b"authorization" not in catcher.requests[0].lower()


def test_a_missing_token_variable_is_one_clear_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DPT_NO_SUCH_TOKEN"}
    done = subprocess.run(
        connect_command("http://127.0.0.1:9/mcp", "--token-env", "DPT_NO_SUCH_TOKEN"),
        capture_output=True,
        text=True,
        env=env,
        timeout=SPAWN_TIMEOUT,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "dpt-launch connect: error: --token-env DPT_NO_SUCH_TOKEN: that environment variable is empty or not set"
    ]
    bad = subprocess.run(
        connect_command("127.0.0.1:8765"), capture_output=True, text=True, timeout=SPAWN_TIMEOUT
    )
    assert bad.returncode == 2 and "is not an http(s) URL" in bad.stderr


@pytest.mark.slow
@pytest.mark.parametrize("how", ["eof", "sigterm"])
def test_eof_or_sigterm_stop_the_bridge_at_once(daemon: Daemon, how: str) -> None:
    proc = subprocess.Popen(
        connect_command(daemon.url),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin and proc.stdout
    reply = initialize(proc, "raw")  # stdout carries only protocol lines
    assert reply["result"]["serverInfo"]["name"] == "doc-processing-std-tools"
    if how == "eof":
        proc.stdin.close()
    else:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert proc.stdout.read() == b""
    assert b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


def test_client_config_with_url_prints_the_connect_form() -> None:
    flags = ["--url", "http://127.0.0.1:8765/mcp", "--token-env", "DPT_TOKEN"]
    done = subprocess.run(
        [*launcher_command(), "client-config", "claude-desktop", *flags],
        capture_output=True,
        text=True,
        timeout=SPAWN_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)["mcpServers"]["dpt"]
    assert Path(entry["command"]).name == "dpt-launch"
    assert entry["args"] == [
        "connect",
        "http://127.0.0.1:8765/mcp",
        "--token-env",
        "DPT_TOKEN",
        "--profile",
        "claude-desktop",
    ]
    code = subprocess.run(
        [*launcher_command(), "client-config", "claude-code", "--url", "http://127.0.0.1:8765/mcp"],
        capture_output=True,
        text=True,
        timeout=SPAWN_TIMEOUT,
    )
    assert code.stdout.strip().endswith(
        "dpt-launch connect http://127.0.0.1:8765/mcp --profile claude-code"
    )
    assert "--config" not in code.stdout


@pytest.mark.slow
async def test_a_token_protected_daemon_through_the_bridge(
    daemon_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real daemon with ``auth``: the right token works through the bridge, a wrong one is refused."""
    monkeypatch.setenv("DPT_TEST_TOKEN", "s3cret-token-for-the-daemon")
    text = daemon_config.read_text()
    daemon_config.write_text('transport: {type: http, auth: {token: "${DPT_TEST_TOKEN}"}}\n' + text)
    running = Daemon(daemon_config)
    running.start()
    try:
        async with bridged(running.url, "--token-env", "DPT_TEST_TOKEN") as client:
            result = await client.call_tool("write_memory", {"key": "k", "value": "v"})
            assert not result.is_error
        async with bridged(
            running.url, "--token-env", "WRONG_TOKEN", env={"WRONG_TOKEN": "nope"}, handshake=False
        ) as client:
            with pytest.raises(MCPError, match="refused our credentials"):
                await client.initialize()  # refused at the handshake: nothing is served
        assert "s3cret-token-for-the-daemon" not in running.stderr()
    finally:
        running.stop()


@pytest.mark.slow
def test_a_balancer_s_html_error_page_is_one_line(tmp_path: Path) -> None:
    """HAProxy answers 502 with an HTML page over several lines; the bridge's error quotes it
    on one line (seen in the fleet test when a launcher was killed under load)."""
    import http.server

    page = b"<html><body><h1>502 Bad Gateway</h1>\nThe server returned an invalid response.\n</body></html>\n"

    class BadGateway(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(502)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), BadGateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proc = subprocess.Popen(
        connect_command(f"http://127.0.0.1:{server.server_address[1]}/mcp"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        reply = initialize(proc)
        message = reply["error"]["message"]
        assert "HTTP 502" in message and "Bad Gateway" in message, message
        assert "\n" not in message, message
    finally:
        proc.kill()
        proc.wait()
        server.shutdown()
