"""Raw MCP JSON-RPC for tests and benchmarks that must see the wire (one place for both).

Most tests talk through the official ``mcp`` client (:func:`helpers.launch.launched`). These
helpers are for the ones that check the bytes themselves: stdout carries nothing but
protocol lines, a signal stops a server mid-session, a Host header is refused, a
session expires, or a benchmark times the first answer without a client library in
the way. Over stdio a message is one JSON line; over HTTP it is one POST to ``/mcp``
(stdlib ``http.client``, full control over every header), answered with JSON or SSE.
"""

from __future__ import annotations

import http.client
import json
import subprocess
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import ByteStream

PROTOCOL = "2025-11-25"


def message(method: str, params: dict[str, Any] | None = None, *, id: int | None = None) -> dict:
    """A JSON-RPC request (with *id*) or notification (without)."""
    built: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        built["id"] = id
    if params is not None:
        built["params"] = params
    return built


def initialize_params(client: str = "test") -> dict[str, Any]:
    """The ``initialize`` params of a client with no capabilities."""
    return {
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": client, "version": "0"},
    }


# -- stdio: one JSON message per line ----------------------------------------------------


def send(proc: subprocess.Popen[bytes], *messages: dict) -> None:
    """Write *messages* to the server's stdin, one line each, in one flush."""
    assert proc.stdin is not None
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    proc.stdin.flush()


def receive(proc: subprocess.Popen[bytes], id: int) -> dict:
    """Read stdout lines until the reply to request *id* (notifications are skipped)."""
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise EOFError(f"the server closed stdout before answering request {id}")
        reply = json.loads(line)  # stdout carries protocol lines only: anything else fails here
        if reply.get("id") == id:
            return reply


def initialize(proc: subprocess.Popen[bytes], client: str = "test") -> dict:
    """Send ``initialize`` (id 1) and return the server's reply."""
    send(proc, message("initialize", initialize_params(client), id=1))
    return receive(proc, 1)


def first_tools(proc: subprocess.Popen[bytes]) -> list[dict]:
    """The handshake (``initialize`` id 1, ``initialized``) and ``tools/list`` (id 2) in one
    write, as a client that lists at once does: the tools of the reply."""
    send(
        proc,
        message("initialize", initialize_params(), id=1),
        message("notifications/initialized"),
        message("tools/list", {}, id=2),
    )
    return list(receive(proc, 2)["result"]["tools"])


# -- streamable HTTP: one POST per message -------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def message(self, id: int | None = None) -> dict:
        """The JSON-RPC reply in the body, whether sent as JSON or as SSE events."""
        return reply_message(self.headers.get("content-type", ""), self.body, id)


def reply_message(content_type: str, body: bytes | str, id: int | None = None) -> dict:
    """The reply to request *id* (else the first message) in an HTTP response body."""
    text = body.decode() if isinstance(body, bytes) else body
    if not content_type.startswith("text/event-stream"):
        return json.loads(text)
    events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    return next(e for e in events if id is None or e.get("id") == id)


def rpc_headers(session: str | None = None) -> dict[str, str]:
    """The headers the official clients send with every POST."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
    }
    if session:
        headers["Mcp-Session-Id"] = session
    return headers


def request(
    port: int,
    method: str,
    path: str,
    *,
    host: str | None = "default",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = 30,
) -> Reply:
    """One raw HTTP request to 127.0.0.1 with full control over the Host header
    (``"default"``: ``127.0.0.1:<port>``; None: no Host header at all)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        if host is not None:
            conn.putheader("Host", f"127.0.0.1:{port}" if host == "default" else host)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return Reply(
            response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        )
    finally:
        conn.close()


def rpc(
    port: int,
    method: str,
    params: dict | None = None,
    *,
    session: str | None = None,
    host: str | None = "default",
    headers: dict[str, str] | None = None,
    request_id: int | None = 1,
    path: str = "/mcp",
) -> Reply:
    """A JSON-RPC message POSTed to *path* as the official clients do (no id: a notification)."""
    body = json.dumps(message(method, params, id=request_id)).encode()
    all_headers = {**rpc_headers(session), **(headers or {})}
    return request(port, "POST", path, host=host, headers=all_headers, body=body)


def open_session(
    port: int, headers: dict[str, str] | None = None, client: str = "test", path: str = "/mcp"
) -> str:
    """Initialize an MCP session over raw HTTP (at *path*); returns its id."""
    reply = rpc(port, "initialize", initialize_params(client), headers=headers, path=path)
    assert reply.status == 200, reply
    session = reply.headers["mcp-session-id"]
    done = rpc(
        port,
        "notifications/initialized",
        session=session,
        headers=headers,
        request_id=None,
        path=path,
    )
    assert done.status == 202, done
    return session


async def open_post(port: int, path: str, headers: dict[str, str], body: bytes) -> ByteStream:
    """A POST sent on a connection of its own and left open (``Connection: close``): its
    answer, which may be held open, is read with :func:`read_to_end`."""
    return await _open_request(port, "POST", path, headers, body)


async def open_get(port: int, path: str, headers: dict[str, str]) -> ByteStream:
    """A GET (an MCP session's stream) on a connection of its own, left open."""
    return await _open_request(port, "GET", path, headers, b"")


async def _open_request(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes
) -> ByteStream:
    stream = await anyio.connect_tcp("127.0.0.1", port)
    head = [
        f"{method} {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Connection: close",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    await stream.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
    return stream


async def read_to_end(stream: ByteStream) -> bytes:
    """All that comes on *stream* until the server ends it (then closed here)."""
    chunks: list[bytes] = []
    async with stream:
        while True:
            try:
                chunks.append(await stream.receive())
            except anyio.EndOfStream:
                return b"".join(chunks)
