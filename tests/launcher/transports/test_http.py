"""The HTTP transport: Host/Origin guard, tokens, /health and /ready, limits, big replies,
session expiry, graceful shutdown and the access log. Real ``dpt-launch`` processes on
127.0.0.1, raw HTTP (stdlib ``http.client``) and the official clients."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from fastmcp import FastMCP
from starlette.testclient import TestClient

from doc_processing_std_tools.launcher.calls.pin_gate import PinGate
from doc_processing_std_tools.launcher.cli.main import main
from doc_processing_std_tools.launcher.config.transport import TransportConfig
from doc_processing_std_tools.launcher.external.client_requests import HttpClient
from doc_processing_std_tools.launcher.transports.http import FastPathWhile, build_app
from doc_processing_std_tools.launcher.transports.wire_errors import INVALID_REQUEST_TEXT
from helpers import launch
from helpers.launch import Launched, launcher_command, text_of
from helpers.paths import SERVERS, python_path
from helpers.rpc import (
    PROTOCOL,
    Reply,
    initialize_params,
    open_session,
    request,
    rpc,
    rpc_headers,
)

TOKENS = ("first-token-3f9a", "second-token-77c1")


# -- a launcher on a free port ---------------------------------------------------


@contextmanager
def http_launcher(
    folder: Path, config: str, env: dict[str, str] | None = None
) -> Iterator[Launched]:
    """``dpt-launch --transport http --port 0`` on the YAML text *config*, written to *folder*."""
    path = folder / "tools.yaml"
    path.write_text(textwrap.dedent(config), encoding="utf-8")
    with launch.http_launcher(path, env=env) as launched:
        yield launched


# -- Host and Origin ---------------------------------------------------------------

GUARDED = """\
    transport:
      type: http
      allowed_hosts: ["*.corp.example", exact.example]
      allowed_origins: ["https://app.example"]
      max_body_bytes: 1048576
    servers:
      fs:
        server: filesystem
        settings: {{roots: [{root}], max_read_bytes: 6291456}}
      echo:
        module: helpers.servers.sample_servers:echo_server
"""


@pytest.fixture(scope="module")
def guarded() -> Iterator[tuple[Launched, Path]]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        root = folder / "root"
        root.mkdir()
        with http_launcher(folder, GUARDED.format(root=root)) as launched:
            yield launched, root


# (Host, Origin, status); "{port}" is the launcher's port. Every case writes its own file.
HOST_ORIGIN_CASES = [
    ("127.0.0.1:{port}", None, 200),
    ("127.0.0.1", None, 200),
    ("localhost:{port}", None, 200),
    ("LOCALHOST:{port}", None, 200),
    ("[::1]:{port}", None, 200),
    ("tools.corp.example", None, 200),
    ("exact.example:8080", None, 200),
    ("127.0.0.1:{port}", "http://127.0.0.1:{port}", 200),
    ("localhost:{port}", "http://localhost:3000", 200),
    ("127.0.0.1:{port}", "https://app.example", 200),
    ("evil.example", None, 421),
    ("evil.example:{port}", None, 421),
    ("127.0.0.1.evil.example", None, 421),
    ("127.0.0.1.evil.example:{port}", None, 421),
    ("localhost.evil.example:{port}", None, 421),
    ("corp.example", None, 421),
    ("sub.exact.example", None, 421),
    ("", None, 400),
    ("127.0.0.1:{port}", "http://evil.example", 403),
    ("127.0.0.1:{port}", "http://127.0.0.1.evil.example:{port}", 403),
    ("127.0.0.1:{port}", "https://evil.app.example", 403),
    ("127.0.0.1:{port}", "null", 403),
    ("evil.example", "http://evil.example", 421),
    (None, None, 400),
]


@pytest.mark.parametrize(("host", "origin", "status"), HOST_ORIGIN_CASES)
def test_host_and_origin_are_checked_before_any_tool_runs(guarded, host, origin, status) -> None:
    launched, root = guarded
    port = launched.port
    session = open_session(port)  # a real session: a refused request would otherwise write
    target = root / f"case-{abs(hash((host, origin)))}.txt"
    headers = {"Origin": origin.format(port=port)} if origin else {}
    reply = rpc(
        port,
        "tools/call",
        {"name": "write_file", "arguments": {"path": str(target), "content": "written"}},
        session=session,
        host=host.format(port=port) if host is not None else None,
        headers=headers,
    )
    assert reply.status == status, reply
    if status == 200:
        assert target.read_text() == "written"
    else:
        assert not target.exists()


def test_refused_requests_leave_existing_files_untouched(guarded) -> None:
    launched, root = guarded
    target = root / "keep.txt"
    target.write_text("original")
    session = open_session(launched.port)
    for host, origin in [("evil.example", None), ("127.0.0.1", "http://evil.example")]:
        reply = rpc(
            launched.port,
            "tools/call",
            {"name": "write_file", "arguments": {"path": str(target), "content": "hijacked"}},
            session=session,
            host=host,
            headers={"Origin": origin} if origin else {},
        )
        assert reply.status in (403, 421)
    assert target.read_text() == "original"


NOT_JSON_RPC = [  # (body, the id answered: the body's when it has a readable one)
    (b"{}", None),
    (b"[]", None),
    (b'{"jsonrpc": "2.0", "id": 1}', 1),
    (b'{"jsonrpc": "2.0", "id": "a", "method": 5}', "a"),
    (b'{"jsonrpc": "2.0", "id": true}', None),
    (b"42", None),
]


@pytest.mark.parametrize(("body", "request_id"), NOT_JSON_RPC)
def test_json_that_is_not_json_rpc_gets_one_line_and_no_session(guarded, body, request_id) -> None:
    """As stdio answers it: -32600 with one readable line, no pydantic report (its URLs),
    the body's id when it can be read, and no ``mcp-session-id`` of a session the refusal did
    not open."""
    launched, _root = guarded
    reply = request(launched.port, "POST", "/mcp", headers=rpc_headers(), body=body)
    assert reply.status == 400, reply
    assert "mcp-session-id" not in reply.headers
    error = reply.json()
    assert error == {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": -32600, "message": INVALID_REQUEST_TEXT},
    }
    assert len(reply.body) < 1024 and b"pydantic" not in reply.body
    assert reply.headers["content-type"] == "application/json"
    session = open_session(launched.port)
    known = request(launched.port, "POST", "/mcp", headers=rpc_headers(session), body=b'{"id": 7}')
    assert (known.status, known.json()["error"]["code"]) == (400, -32600)
    assert known.json()["id"] == 7 and known.headers["mcp-session-id"] == session


def test_health_and_ready_without_auth(guarded) -> None:
    launched, _ = guarded
    health = request(launched.port, "GET", "/health")
    assert (health.status, health.json()) == (200, {"status": "ok"})
    ready = request(launched.port, "GET", "/ready")
    assert ready.status == 200
    assert ready.json() == {
        "status": "ready",
        "servers": {
            "fs": {"state": "up", "required": False},
            "echo": {"state": "up", "required": False},
        },
    }


# -- body cap ----------------------------------------------------------------------


def test_a_body_over_max_body_bytes_gets_413_and_writes_nothing(guarded) -> None:
    launched, root = guarded
    session = open_session(launched.port)
    small, large = root / "small.txt", root / "large.txt"
    ok = rpc(
        launched.port,
        "tools/call",
        {"name": "write_file", "arguments": {"path": str(small), "content": "x" * 500_000}},
        session=session,
    )
    assert ok.status == 200
    assert small.stat().st_size == 500_000
    refused = rpc(
        launched.port,
        "tools/call",
        {"name": "write_file", "arguments": {"path": str(large), "content": "x" * 1_100_000}},
        session=session,
    )
    assert refused.status == 413
    assert not large.exists()


# -- big replies -------------------------------------------------------------------

FIVE_MIB = 5 * 1024 * 1024


async def test_a_5_mib_reply_reaches_the_official_mcp_client(guarded) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    launched, root = guarded
    big = root / "big-mcp.txt"
    big.write_text("0123456789abcdef" * (FIVE_MIB // 16))
    with anyio.fail_after(60):
        async with (
            streamable_http_client(launched.url) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool("read_text_file", {"path": str(big)})
    assert not result.is_error, text_of(result)[:300]
    assert len(text_of(result)) == FIVE_MIB


async def test_a_5_mib_reply_reaches_fastmcp_client(guarded) -> None:
    from fastmcp import Client

    launched, root = guarded
    big = root / "big-fastmcp.txt"
    big.write_text("fedcba9876543210" * (FIVE_MIB // 16))
    with anyio.fail_after(60):
        async with Client(launched.url) as client:
            result = await client.call_tool("read_text_file", {"path": str(big)})
    assert len(text_of(result)) == FIVE_MIB


# -- tokens --------------------------------------------------------------------------

AUTHED = """\
    log_level: DEBUG
    transport:
      type: http
      auth: {token: ["${DPT_TOKEN}", "${DPT_TOKEN_2}"]}
      log_format: json
    servers:
      echo:
        module: helpers.servers.sample_servers:echo_server
"""


@pytest.fixture(scope="module")
def authed() -> Iterator[Launched]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        http_launcher(
            Path(tmp), AUTHED, env={"DPT_TOKEN": TOKENS[0], "DPT_TOKEN_2": TOKENS[1]}
        ) as launched,
    ):
        yield launched


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, 401),
        (bearer("wrong-token"), 401),
        (bearer(TOKENS[0][:-1]), 401),
        ({"Authorization": f"Basic {TOKENS[0]}"}, 401),
        (bearer(TOKENS[0]), 200),
        (bearer(TOKENS[1]), 200),
    ],
)
def test_tokens_per_route(authed, headers, expected) -> None:
    port = authed.port
    health = request(port, "GET", "/health", headers=headers)
    assert (health.status, health.json()) == (200, {"status": "ok"})  # never needs a token

    ready = request(port, "GET", "/ready", headers=headers)
    assert ready.status == expected
    init = rpc(
        port,
        "initialize",
        initialize_params("t"),
        headers=headers,
    )
    assert init.status == expected
    if expected == 401:
        for reply in (ready, init):
            assert reply.headers["www-authenticate"].startswith("Bearer")
            why = reply.json()["error_description"]  # (never an empty body)
            assert "\n" not in why and len(reply.body) < 1024
            if "Authorization" not in headers or headers["Authorization"].startswith("Basic"):
                assert why.startswith("no bearer token: send 'Authorization: Bearer ")
        assert b"echo" not in ready.body
    else:
        assert ready.json()["status"] == "ready"
        assert "mcp-session-id" in init.headers


async def test_the_official_client_calls_with_a_token_and_nothing_leaks_into_logs(authed) -> None:
    from fastmcp import Client

    secret_argument = "argument-text-that-must-not-be-logged"
    assert request(authed.port, "GET", "/ready", headers=bearer("wrong")).status == 401
    open_session(authed.port, headers=bearer(TOKENS[0]))
    with anyio.fail_after(30):
        async with Client(authed.url, auth=TOKENS[1]) as client:
            result = await client.call_tool("echo", {"text": secret_argument})
    assert text_of(result) == secret_argument
    log = wait_for_log(authed, '"mcp_method": "tools/call"')  # written once the response is sent
    for token in TOKENS:
        assert token not in log
    assert secret_argument not in log
    access = [json.loads(line) for line in log.splitlines() if '"dpt-launch.access"' in line]
    calls = [entry for entry in access if entry.get("mcp_method") == "tools/call"]
    assert calls, log[-2000:]
    assert calls[-1]["tool"] == "echo"
    assert calls[-1]["status"] == 200
    assert calls[-1]["method"] == "POST" and calls[-1]["path"] == "/mcp"
    assert calls[-1]["duration_ms"] >= 0
    assert "session" in calls[-1]  # None here: fastmcp's modern-era client keeps no session
    opened = [e for e in access if e["mcp_method"] == "initialize" and e["status"] == 200]
    assert opened and all(entry["session"] for entry in opened)  # the id the server handed out
    assert any(entry["status"] == 401 for entry in access)


def test_a_non_loopback_bind_without_auth_refuses_to_start(write_config, capsys) -> None:
    path = write_config(
        "servers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    status = main(["--config", str(path), "--transport", "http", "--host", "0.0.0.0"])
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1
    assert "without auth" in err and "auth: none" in err and "token" in err


def test_a_non_loopback_host_in_the_config_names_file_and_line(write_config, capsys) -> None:
    path = write_config(
        "transport:\n  type: http\n  host: 0.0.0.0\nservers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3: transport.host: serving HTTP on 0.0.0.0 without auth" in err


@pytest.mark.parametrize("auth", ["none", "{token: some-token}"])
def test_auth_none_or_a_token_allows_a_non_loopback_host(write_config, capsys, auth) -> None:
    path = write_config(
        f"transport:\n  type: http\n  host: 0.0.0.0\n  auth: {auth}\n"
        "servers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    assert main(["--config", str(path), "--check"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("transport", "expected"),
    [
        ("{type: http, auth: {token: ''}}", "transport.auth.token: a token is empty"),
        (
            "{type: http, auth: {token: []}}",
            "transport.auth.token: give at least one token, or write auth: none",
        ),
        (
            "{type: http, max_body: 5}",
            "transport.max_body: unknown key; did you mean 'max_body_bytes'?",
        ),
        ("{type: http, shutdown_grace: -1}", "transport.shutdown_grace: Input should be greater"),
    ],
)
def test_bad_transport_keys_give_one_line(write_config, capsys, transport, expected) -> None:
    path = write_config(f"transport: {transport}\nservers:\n  echo: {{}}\n")
    assert main(["--config", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:1: {expected}" in err
    assert len(err.strip().splitlines()) == 1


# -- /ready states -------------------------------------------------------------------


def _ready(composition) -> tuple[int, dict]:
    from doc_processing_std_tools.launcher.compose import Composition
    from doc_processing_std_tools.launcher.transports.http import Readiness

    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/ready", "headers": []}
    anyio.run(Readiness(lambda: Composition.server_states(composition)), scope, receive, send)
    return sent[0]["status"], json.loads(sent[1]["body"])


def test_ready_is_503_only_when_a_required_server_is_not_up() -> None:
    """How /ready sums up states. (Live states come from the supervisor: stand-ins here.)"""

    def mount(name: str, state: str, required: bool) -> SimpleNamespace:
        return SimpleNamespace(
            name=name, state=state, entry=SimpleNamespace(required=required), supervisor=None
        )

    composition = SimpleNamespace(
        mounts=[mount("a", "up", False), mount("b", "up", True)],
        pins=PinGate(),  # (nothing drifted)
        skipped=[("c", "needs the popoto extra")],
        loaded=SimpleNamespace(
            config=SimpleNamespace(servers={"c": SimpleNamespace(required=False, external=False)})
        ),
    )
    status, body = _ready(composition)
    assert status == 200
    assert body == {
        "status": "ready",
        "servers": {
            "a": {"state": "up", "required": False},
            "b": {"state": "up", "required": True},
            "c": {"state": "skipped", "required": False, "reason": "needs the popoto extra"},
        },
    }
    composition.mounts[0].state = "failed"
    assert _ready(composition)[0] == 200  # not required
    for state in ("starting", "restarting", "failed"):
        composition.mounts[1].state = state
        status, body = _ready(composition)
        assert status == 503
        assert body["status"] == "not ready"
        assert body["servers"]["b"] == {"state": state, "required": True}
    composition.mounts[1].state = "up"
    composition.loaded = SimpleNamespace(  # a required server that was skipped
        config=SimpleNamespace(servers={"c": SimpleNamespace(required=True, external=False)})
    )
    assert _ready(composition)[0] == 503


# -- slow clients, idle sessions -------------------------------------------------------

LIMITED = """\
    log_level: INFO
    transport:
      type: http
      max_connections: 8
      max_connections_per_client: 3
      header_timeout: 1
      idle_timeout: 1
      session_idle_timeout: 1
      max_sessions: 3
    servers:
      echo:
        module: helpers.servers.sample_servers:echo_server
"""


def wait_for_log(launched: Launched, text: str, timeout: float = 30) -> str:
    """The launcher's stderr once it holds *text* (the log is what the test waits on)."""
    deadline = time.monotonic() + timeout
    while text not in (log := launched.stderr()):
        assert time.monotonic() < deadline, f"never logged {text!r}: {log[-2000:]}"
        time.sleep(0.02)
    return log


def wait_until_active(port: int, count: int = 1) -> None:
    """Until *count* ``bump`` calls of sample_servers' counter are running (asked in a
    session of its own: ``rpc`` numbers every request 1)."""
    deadline = time.monotonic() + 30
    call = {"name": "active", "arguments": {}}
    session = open_session(port)
    while f'"text":"{count}"' not in rpc(port, "tools/call", call, session=session).body.decode():
        assert time.monotonic() < deadline, "the call never started"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def limited() -> Iterator[Launched]:
    with tempfile.TemporaryDirectory() as tmp, http_launcher(Path(tmp), LIMITED) as launched:
        yield launched


def _trickle(
    port: int,
    stop: threading.Event,
    connected: threading.Semaphore,
    closed: list[bool],
    source: str = "127.0.0.1",
) -> None:
    """A slowloris client: request headers one byte every 0.1 s, never finished."""
    with socket.create_connection(("127.0.0.1", port), source_address=(source, 0)) as sock:
        connected.release()
        sock.settimeout(0.1)
        header = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 10_000
        for byte in header:
            if stop.is_set():
                return
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(1) == b"":
                    break  # the server closed the connection
            except TimeoutError:
                continue
            except OSError:
                break
            time.sleep(0.1)
        closed.append(True)


@pytest.mark.slow
def test_trickling_clients_are_cut_off_and_a_legit_client_is_served(limited) -> None:
    """Ten tricklers (from addresses of their own) on a launcher of eight connections: those
    that show no token may hold only half of them, so a client that sends its request is served."""
    port = limited.port
    stop = threading.Event()
    closed: list[bool] = []
    connected = threading.Semaphore(0)
    tricklers = [
        threading.Thread(
            target=_trickle, args=(port, stop, connected, closed, f"127.0.0.{i + 2}"), daemon=True
        )
        for i in range(10)
    ]
    for thread in tricklers:
        thread.start()
    try:
        for _ in tricklers:  # all ten are connected (accepted before the request below)
            assert connected.acquire(timeout=10)
        assert request(port, "GET", "/health").status == 200  # (it was a 503 when all were taken)
        for thread in tricklers:
            thread.join(timeout=10)
        assert len(closed) == 10  # the server closed every trickling connection
        assert request(port, "GET", "/health").status == 200
        session = open_session(port)
        reply = rpc(
            port, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}, session=session
        )
        assert reply.status == 200 and b"hi" in reply.body
    finally:
        stop.set()
    assert "closed a connection that sent no request headers within 1s" in limited.stderr()


def test_one_client_address_keeps_at_most_its_share_of_connections(limited) -> None:
    """max_connections_per_client: 3: a fourth connection from one address is refused with 429
    at once; another address is served meanwhile."""
    port = limited.port
    held = [
        socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.9", 0))
        for _ in range(3)
    ]
    try:
        with socket.create_connection(
            ("127.0.0.1", port), source_address=("127.0.0.9", 0)
        ) as extra:
            extra.settimeout(10)
            assert extra.recv(100).startswith(b"HTTP/1.1 429 ")
            assert extra.recv(100) == b""  # and closed
        assert request(port, "GET", "/health").status == 200
    finally:
        for sock in held:
            sock.close()


def test_websocket_upgrades_do_not_use_up_a_clients_connections(limited) -> None:
    """No websocket is served: an upgrade is answered as plain HTTP and its connection, once
    closed, no longer counts against max_connections_per_client (it did: 3 upgrades, then 429)."""
    port = limited.port
    upgrade = (
        b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade"
        b"\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    for _ in range(6):  # twice the address's share
        with socket.create_connection(
            ("127.0.0.1", port), source_address=("127.0.0.10", 0)
        ) as sock:
            sock.settimeout(10)
            sock.sendall(upgrade)
            answer = sock.recv(100)
            assert answer.startswith(b"HTTP/1.1 ") and b" 101 " not in answer[:13], answer
    deadline = time.monotonic() + 10
    while True:  # (the server sees each close a moment later: wait on what it answers)
        with socket.create_connection(
            ("127.0.0.1", port), source_address=("127.0.0.10", 0)
        ) as sock:
            sock.settimeout(10)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = sock.recv(100)
        if answer.startswith(b"HTTP/1.1 200 ") or time.monotonic() > deadline:
            break
    assert answer.startswith(b"HTTP/1.1 200 "), answer


def test_the_soft_descriptor_limit_is_raised_to_the_hard_limit(limited) -> None:
    limits = Path(f"/proc/{limited.proc.pid}/limits")
    if not limits.exists():
        pytest.skip("needs /proc (Linux)")
    line = next(
        line for line in limits.read_text().splitlines() if line.startswith("Max open files")
    )
    soft, hard = line.split()[3:5]
    assert soft == hard


def test_an_abandoned_session_expires(limited) -> None:
    port = limited.port
    session = open_session(port)
    assert rpc(port, "tools/list", session=session).status == 200
    # abandoned: no request for longer than session_idle_timeout (1 s), and the SDK says so
    wait_for_log(limited, f"Session {session} idle timeout")
    assert rpc(port, "tools/list", session=session).status == 404


@pytest.mark.slow
def test_sessions_beyond_max_sessions_get_503_until_one_ends(tmp_path) -> None:
    # A launcher of its own: no sessions of earlier tests, none expiring during the test.
    config = LIMITED.replace("session_idle_timeout: 1", "session_idle_timeout: 600")
    with http_launcher(tmp_path, config) as launched:
        check_max_sessions(launched.port)


def check_max_sessions(port: int) -> None:
    sessions = [open_session(port) for _ in range(3)]
    assert rpc(port, "initialize", initialize_params("t")).status == 503
    headers = {"Mcp-Session-Id": sessions[0], "MCP-Protocol-Version": PROTOCOL}
    assert request(port, "DELETE", "/mcp", headers=headers).status == 200
    open_session(port)


# -- shutdown ----------------------------------------------------------------------------

SLOW = """\
    transport:
      type: http
      shutdown_grace: {grace}
    servers:
      counter:
        module: helpers.servers.sample_servers:make_counter
"""


def _open_get_stream(port: int, session: str) -> http.client.HTTPResponse:
    """The long-lived GET stream the official clients keep open for server messages."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(
        "GET",
        "/mcp",
        headers={
            "Accept": "text/event-stream",
            "Mcp-Session-Id": session,
            "MCP-Protocol-Version": PROTOCOL,
        },
    )
    response = conn.getresponse()
    assert response.status == 200
    return response


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_lets_the_in_flight_call_finish_then_exits_cleanly(tmp_path, sig) -> None:
    with http_launcher(tmp_path, SLOW.format(grace=600)) as launched:
        port = launched.port
        session = await anyio.to_thread.run_sync(open_session, port)
        stream = await anyio.to_thread.run_sync(_open_get_stream, port, session)
        replies: list[Reply] = []

        def slow_call() -> None:
            call = {"name": "bump", "arguments": {"delay": 1.5}}
            replies.append(rpc(port, "tools/call", call, session=session))

        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, slow_call)
            await anyio.to_thread.run_sync(wait_until_active, port)
            launched.proc.send_signal(sig)
        assert replies[0].status == 200
        assert '"isError":false' in replies[0].body.decode()
        # Exits once the call is done: the open GET stream does not hold the exit up to the
        # grace period (600 s; the wait would time out first).
        assert await anyio.to_thread.run_sync(launched.proc.wait, 60) == 0
        assert stream.read() == b""  # ended cleanly, not reset
        err = launched.stderr()
    assert "Traceback" not in err
    assert " ERROR " not in err


@pytest.mark.slow  # (waits out the shutdown grace)
async def test_a_call_past_the_grace_period_is_cut_and_the_exit_is_still_clean(tmp_path) -> None:
    with http_launcher(tmp_path, SLOW.format(grace=0.5)) as launched:
        session = await anyio.to_thread.run_sync(open_session, launched.port)

        def slow_call() -> Reply:
            return rpc(
                launched.port,
                "tools/call",
                {"name": "bump", "arguments": {"delay": 600}},
                session=session,
            )

        async with anyio.create_task_group() as group:
            replies: list[Reply] = []

            async def call() -> None:
                replies.append(await anyio.to_thread.run_sync(slow_call))

            group.start_soon(call)
            await anyio.to_thread.run_sync(wait_until_active, launched.port)
            launched.proc.send_signal(signal.SIGTERM)
        assert replies[0].status == 503  # cut at the grace period (the call takes 600 s)
        assert launched.proc.wait(timeout=60) == 0
        err = launched.stderr()
    assert "Traceback" not in err


def test_accepted_connections_get_tcp_nodelay() -> None:
    """Without it every reply written as headers-then-body waited ~40 ms for a delayed ACK."""
    import asyncio

    from doc_processing_std_tools.launcher.cli.serve import bind

    async def accepted_nodelay() -> int:
        flags: list[int] = []

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                flags.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        listener = bind("127.0.0.1", 0)
        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection(*listener.getsockname())
            while not flags:
                await asyncio.sleep(0.01)
            writer.close()
        return flags[0]

    assert asyncio.run(accepted_nodelay()) != 0


@pytest.mark.slow
def test_sigterm_over_http_stops_every_lifespan(tmp_path) -> None:
    marker = tmp_path / "marker"
    config = f"servers:\n  life:\n    module: helpers.servers.sample_servers:make_with_lifespan\n    settings: {{marker: {marker}}}\n"
    with http_launcher(tmp_path, config) as launched:
        assert marker.read_text() == "started"
        assert launched.stop(signal.SIGTERM) == 0
    assert marker.read_text() == "stopped"
    assert "Traceback" not in launched.stderr()


@pytest.mark.slow
def test_a_lifespan_failing_at_start_over_http_is_one_line_and_exit_1(tmp_path) -> None:
    path = tmp_path / "tools.yaml"
    marker = tmp_path / "missing-folder" / "marker"
    path.write_text(
        f"servers:\n  life:\n    module: helpers.servers.sample_servers:make_with_lifespan\n    settings: {{marker: {marker}}}\n"
    )
    pythonpath = python_path()
    done = subprocess.run(
        [*launcher_command(), "--config", str(path), "--transport", "http", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": pythonpath},
    )
    assert done.returncode == 1
    assert "a server failed: FileNotFoundError" in done.stderr
    assert "Traceback" not in done.stderr


ROOTS_SERVER = '''
from fastmcp import Context, FastMCP

mcp = FastMCP("asks")


@mcp.tool
async def client_roots(ctx: Context) -> str:
    """Ask the client for its roots on this call's own stream."""
    import mcp_types as types
    from mcp.shared.message import ServerMessageMetadata

    metadata = ServerMessageMetadata(related_request_id=ctx.request_context.request_id)
    result = await ctx.session.send_request(
        types.ListRootsRequest(), types.ListRootsResult, metadata=metadata
    )
    return ",".join(str(root.uri) for root in result.roots)
'''


@pytest.mark.slow
async def test_a_call_can_still_ask_the_client_during_the_call(tmp_path) -> None:
    """Replies go out as JSON, yet a call that sends a request first keeps its SSE stream."""
    import mcp_types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    (tmp_path / "asks.py").write_text(ROOTS_SERVER)
    config = "servers:\n  asks:\n    module: asks:mcp\n"
    pythonpath = python_path(tmp_path)

    async def list_roots(_context: object) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///srv/project", name="p")])

    with http_launcher(tmp_path, config, env={"PYTHONPATH": pythonpath}) as launched:
        with anyio.fail_after(30):
            async with (
                streamable_http_client(launched.url) as (read, write, *_),
                ClientSession(read, write, list_roots_callback=list_roots) as session,
            ):
                await session.initialize()
                result = await session.call_tool("client_roots", {})
        assert not result.is_error, text_of(result)
        assert text_of(result) == "file:///srv/project"


@pytest.mark.slow  # kills and restarts a child
def test_ready_reports_live_states_of_external_servers(tmp_path: Path) -> None:
    """A failed optional server is reported; a required one that restarts makes /ready 503."""
    import sys

    external = SERVERS / "external_server.py"
    config = f"""\
        servers:
          memory-tools:
            settings: {{memory_dir: {tmp_path / "m"}}}
          ghost:
            command: /no/such/mcp-server
          ext:
            command: {sys.executable}
            args: [{external}, {tmp_path / "count"}]
            required: true
        """
    with http_launcher(tmp_path, config) as launched:
        ready = request(launched.port, "GET", "/ready")
        assert ready.status == 200, ready.body
        servers = ready.json()["servers"]
        assert servers["ext"]["state"] == "up" and servers["ext"]["required"]
        assert servers["ghost"]["state"] == "failed"
        assert servers["memory-tools"]["state"] == "up"
        child = next(
            int(pid)
            for pid in os.listdir("/proc")
            if pid.isdigit() and str(tmp_path / "count").encode() in _cmdline(pid)
        )
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while request(launched.port, "GET", "/ready").status != 503:
            assert time.monotonic() < deadline, "the restart never showed in /ready"
            time.sleep(0.1)
        assert request(launched.port, "GET", "/ready").json()["servers"]["ext"]["state"] in (
            "restarting",
            "up",
        )
        deadline = time.monotonic() + 40
        while request(launched.port, "GET", "/ready").status != 200:
            assert time.monotonic() < deadline, "the server never came back"
            time.sleep(0.25)


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.slow  # (a 5 MiB reply: a size storm)
async def test_a_5_mib_first_reply_reaches_a_client_that_declares_roots(tmp_path: Path) -> None:
    """The roots are asked for at tools/list, so the first call's reply is not an SSE event."""
    import mcp_types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    project = tmp_path / "project"
    project.mkdir()
    big = project / "big.txt"
    big.write_text("0123456789abcdef" * (FIVE_MIB // 16))
    config = "servers:\n  filesystem:\n    settings: {max_read_bytes: 6000000}\n"

    async def list_roots(_context: object) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=project.as_uri(), name="p")])

    with http_launcher(tmp_path, config) as launched, anyio.fail_after(60):
        async with (
            streamable_http_client(launched.url) as (read, write, *_),
            ClientSession(read, write, list_roots_callback=list_roots) as session,
        ):
            await session.initialize()
            await session.list_tools()
            result = await session.call_tool("read_text_file", {"path": str(big)})
    assert not result.is_error, text_of(result)[:300]
    assert len(text_of(result)) == FIVE_MIB


class LookedUp(dict[str, Any]):
    """The HTTP client sessions by id, counting the lookups (the fast path's first step)."""

    def __init__(self) -> None:
        super().__init__(known=HttpClient(object(), None))
        self.asked = 0

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.asked += 1
        return super().get(key, default)


class Endpoint:
    """An ASGI app that counts its requests (the fast path: with calls in flight or not)."""

    def __init__(self, in_flight: bool = False) -> None:
        self.served, self.calls = 0, in_flight

    def in_flight(self) -> bool:
        return self.calls

    async def __call__(self, _scope: Any, _receive: Any, _send: Any) -> None:
        self.served += 1


@pytest.mark.parametrize("in_flight", [False, True])
async def test_the_fast_path_still_sees_posts_while_its_calls_are_in_flight(
    in_flight: bool,
) -> None:
    """A reload that removes the last ``per_client`` command mid-call: the call's
    ``notifications/cancelled`` still reaches the fast path, which cancels it at the child."""
    fast, plain = Endpoint(in_flight), Endpoint()
    endpoint = FastPathWhile(fast, plain, lambda: False)  # type: ignore[arg-type]
    await endpoint({"type": "http"}, None, None)  # type: ignore[arg-type]
    assert (fast.served, plain.served) == ((1, 0) if in_flight else (0, 1))


@pytest.mark.parametrize("taking", [False, True])
def test_the_fast_path_sees_a_post_only_while_it_can_take_a_call(taking: bool) -> None:
    """With no ``sessions: per_client`` command (``taking`` false) a known session's POST goes
    straight to the SDK: its body is not read here for nothing."""
    sessions = LookedUp()
    relayed = (SimpleNamespace(http=sessions), lambda profile: {}, lambda: taking)
    app = build_app(FastMCP("t"), dict, TransportConfig(), relayed=relayed)  # type: ignore[arg-type]
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}}
    headers = {"mcp-session-id": "known", "accept": "application/json, text/event-stream"}
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert client.post("/mcp", json=call, headers=headers).status_code == 404  # (the SDK's)
    assert sessions.asked == (1 if taking else 0)
