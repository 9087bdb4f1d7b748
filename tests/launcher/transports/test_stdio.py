"""The launcher's stdio transport (launcher/transports/stdio.py): raw bytes to a real ``dpt-launch``.

Every request gets an answer, malformed or not; the session survives each bad line;
a signal or stdin's EOF stops the launcher even while a sync tool call cannot be
cancelled. (Speed of long lines is a benchmark, not a test: benchmarks/resources.py.)
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from doc_processing_std_tools.launcher.lines import read_lines
from doc_processing_std_tools.launcher.transports.line_writer import LineWriter
from doc_processing_std_tools.launcher.transports.wire_errors import error_reply
from helpers.launch import launcher_command
from helpers.paths import SERVERS
from helpers.stdio_wire import INITIALIZE, REPLY_TIMEOUT, RawStdio
from helpers.waiting import wait_for

SLOW_SERVER = """
import time
from fastmcp import FastMCP

server = FastMCP("slow")
naps = []


@server.tool
def nap(seconds: float) -> str:
    naps.append(seconds)
    time.sleep(seconds)  # a sync tool: runs in a worker thread nothing can cancel
    return "rested"


@server.tool(annotations={"readOnlyHint": True})
def napping() -> int:
    return len(naps)


@server.tool(annotations={"readOnlyHint": True})
def ping() -> str:
    return "pong"
"""


def write_config(tmp_path: Path) -> Path:
    (tmp_path / "slow_server.py").write_text(SLOW_SERVER)
    path = tmp_path / "tools.yaml"
    path.write_text(
        "transport: {type: stdio, shutdown_grace: 3}\n"
        "servers:\n"
        "  memory:\n"
        "    server: memory-tools\n"
        f"    settings: {{memory_dir: {tmp_path / 'mem'}}}\n"
        "  slow:\n"
        "    module: slow_server:server\n"
    )
    return path


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path)


class Wire(RawStdio):
    """A spawned launcher spoken to in raw lines."""

    def __init__(self, config: Path) -> None:
        super().__init__([*launcher_command(), "--config", str(config)], config.parent)

    def call(self, request_id: int, tool: str, arguments: dict) -> bytes:
        return json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
        ).encode()


@contextmanager
def initialized(config: Path) -> Iterator[Wire]:
    """A launcher on *config*, initialized; killed and its pipes closed afterwards."""
    w = Wire(config)
    try:
        w.initialize()
        yield w
    finally:
        w.close()


@pytest.fixture
def wire(config: Path) -> Iterator[Wire]:
    with initialized(config) as w:
        yield w


@pytest.fixture(scope="module")
def lasting_wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wire]:
    """One launcher for a module's worth of requests that must each leave the session usable
    (each test checks that it does); a spawn per request would cost ~1 s of CPU each."""
    with initialized(write_config(tmp_path_factory.mktemp("lasting"))) as w:
        yield w


MALFORMED = [
    # (raw line, expected code, expected id)
    (
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read_memory",'
        b'"arguments":{"key":"\\ud800"}}}',
        -32700,
        5,
    ),
    (b'{"jsonrpc":"2.0","id":"s1","method":"tools/list","params":{"x":"\\udfff"}}', -32700, "s1"),
    (b"garbage", -32700, None),
    (b'{"jsonrpc":"2.0","id":7,"method":', -32700, None),
    (b"\xff\xfe{}", -32700, None),
    (b'{"jsonrpc":"2.0","id":8}', -32600, 8),
    (b'{"jsonrpc":"1.0","id":9,"method":"tools/list"}', -32600, 9),
    (b'{"jsonrpc":"2.0","id":10,"method":7}', -32600, 10),
    (b'{"jsonrpc":"2.0","id":11,"method":"tools/list","params":[1]}', -32600, 11),
    (b"[]", -32600, None),
    (b"42", -32600, None),
    (b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}', -32600, None),
]


@pytest.mark.parametrize(("raw", "code", "request_id"), MALFORMED)
def test_every_malformed_request_gets_an_error_reply(
    lasting_wire: Wire, raw: bytes, code: int, request_id: object
) -> None:
    wire = lasting_wire
    reply = wire.request(raw)
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] == request_id
    assert reply["error"]["code"] == code
    assert "https://" not in reply["error"]["message"]
    # the session goes on: a good request after it is answered as usual
    ok = wire.request(wire.call(100, "ping", {}))
    assert ok["id"] == 100 and ok["result"]["content"][0]["text"] == "pong"


@pytest.mark.slow
def test_a_lone_surrogate_error_says_what_is_wrong(wire: Wire) -> None:
    reply = wire.request(wire.call(3, "write_memory", {"key": "k", "value": "\ud800"}))
    assert reply["id"] == 3
    assert "surrogate" in reply["error"]["message"] or "Unicode" in reply["error"]["message"]
    # nothing was written, and a proper surrogate pair goes through
    assert wire.request(wire.call(4, "write_memory", {"key": "k", "value": "\U0001f600"}))["result"]
    read = wire.request(wire.call(5, "read_memory", {"key": "k"}))
    assert read["result"]["content"][0]["text"] == "\U0001f600"


def test_malformed_lines_in_a_burst_get_one_reply_each(wire: Wire) -> None:
    lines = [raw for raw, _, _ in MALFORMED]
    wire.send(b"\n".join(lines))
    replies = [wire.receive() for _ in lines]
    assert sorted(str(r["id"]) for r in replies) == sorted(str(i) for _, _, i in MALFORMED)


@pytest.mark.slow
def test_blank_lines_and_malformed_responses_get_no_reply(wire: Wire) -> None:
    wire.send(b"")
    wire.send(b"   ")
    wire.send(b'{"jsonrpc":"2.0","result":{}}')  # a response without its id
    wire.send(b'{"jsonrpc":"2.0","id":78,"error":{"code":"bad"}}')
    ok = wire.request(wire.call(1, "ping", {}))
    assert ok["id"] == 1  # the first reply after those lines is this one


@pytest.mark.slow
def test_a_large_request_over_several_reads_arrives_whole(wire: Wire) -> None:
    value = "0123456789abcdef" * (3 << 16)  # 3 MB: many reads of stdin
    assert "result" in wire.request(wire.call(1, "write_memory", {"key": "big", "value": value}))
    reply = wire.request(wire.call(2, "read_memory", {"key": "big"}))
    assert reply["result"]["content"][0]["text"] == value


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["sigterm", "eof"])
def test_the_launcher_stops_within_its_grace_while_a_sync_call_runs(
    wire: Wire, ending: str
) -> None:
    wire.send(wire.call(1, "nap", {"seconds": 120}))
    asked = 2
    while wire.request(wire.call(asked, "napping", {}))["result"]["content"][0]["text"] != "1":
        asked += 1  # until the call is running in its worker thread
    if ending == "sigterm":
        wire.proc.send_signal(signal.SIGTERM)
    else:
        assert wire.proc.stdin
        wire.proc.stdin.close()
    status = wire.proc.wait(timeout=60)  # shutdown_grace is 3 s; the nap 120 s
    assert status == 0
    assert b"Traceback" not in wire.proc.stderr.read()  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_call_finishing_within_the_grace_still_gets_its_reply_before_exit(wire: Wire) -> None:
    wire.send(wire.call(1, "nap", {"seconds": 0.3}))
    assert wire.proc.stdin
    wire.proc.stdin.close()  # EOF right behind the request: its reply still comes
    reply = wire.receive()
    assert reply["id"] == 1 and reply["result"]["content"][0]["text"] == "rested"
    assert wire.proc.wait(timeout=30) == 0


# -- the pieces, in-process -----------------------------------------------------------


def test_read_lines_joins_lines_split_across_reads() -> None:
    read, write = os.pipe()
    payload = b"a" * 3_000_000 + b"\nshort\n\nlast-without-newline"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child writes in small pieces, then exits
        os.close(read)
        for i in range(0, len(payload), 70_001):
            os.write(write, payload[i : i + 70_001])
        os._exit(0)
    os.close(write)
    try:
        lines = list(read_lines(read))
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert lines == [b"a" * 3_000_000, b"short", b"", b"last-without-newline"]


def test_a_read_ending_a_line_begun_earlier_joins_it() -> None:
    """A read holding one line and its newline is taken whole, without splitting; unless an
    earlier read left the line's beginning (on stdin and on a child's stdout alike)."""
    from doc_processing_std_tools.launcher.external.child_pipe import _RoutingProtocol
    from doc_processing_std_tools.launcher.lines import LineBuffer

    read, write = os.pipe()
    buffer = LineBuffer()
    try:
        got = []
        for piece in (b'{"id":1}\n', b'{"id"', b":2}\n", b'{"id":3}\n{"id"', b":4}\n"):
            os.write(write, piece)
            got.append(buffer.read(read))
        os.close(write)
        got.append(buffer.read(read))
    finally:
        os.close(read)
    assert got == [[b'{"id":1}'], [], [b'{"id":2}'], [b'{"id":3}'], [b'{"id":4}'], None]

    class Passes:  # a child pipe that takes no line: every line goes on below
        max_line = None  # (no cap)
        passed = 0

        def _take(self, line: bytes) -> bool:
            return False

    class Below:
        def __init__(self) -> None:
            self.data: list[bytes] = []

        def data_received(self, data: bytes) -> None:
            self.data.append(data)

    below = Below()
    routing = _RoutingProtocol(Passes(), below)  # type: ignore[arg-type]
    for piece in (b'{"id":1}\n', b'{"id"', b":2}\n", b'{"id":3}\n{"id"', b":4}\n"):
        routing.data_received(piece)
    assert below.data == [b'{"id":1}\n', b'{"id":2}\n', b'{"id":3}\n', b'{"id":4}\n']


def test_reads_stay_short_for_short_messages_and_grow_for_a_long_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read asks for 64 KiB unless the last one came back full: a 1 MiB buffer per short
    message costs an mmap, a munmap and two page faults each time."""
    from doc_processing_std_tools.launcher import lines as lines_module

    path = tmp_path / "stdin"
    path.write_bytes(b'{"short": 1}\n' + b"b" * 300_000 + b"\n" + b'{"short": 2}\n')
    asked: list[int] = []
    real_read = os.read

    def read(fd: int, size: int) -> bytes:
        asked.append(size)
        return real_read(fd, 20 if len(asked) == 1 else min(size, 100_000))  # a pipe's pieces

    monkeypatch.setattr(lines_module.os, "read", read)
    fd = os.open(path, os.O_RDONLY)
    try:
        got = list(lines_module.read_lines(fd))
    finally:
        os.close(fd)
    assert got == [b'{"short": 1}', b"b" * 300_000, b'{"short": 2}']
    short, long = lines_module.SHORT_READ, lines_module.LONG_READ
    # a short read, a full one, then long reads until one comes back short
    assert asked == [short, short, long, long, long, short], asked


def test_replies_keep_their_order_and_never_block_the_caller_on_a_full_pipe() -> None:
    """Short lines go out at once only when nothing is queued; a line too big for the pipe
    waits in the writer thread, and the short lines behind it wait their turn."""
    from doc_processing_std_tools.launcher.transports.line_writer import LineWriter

    read, write = os.pipe()
    writer = LineWriter(write)
    try:
        writer.put(b"first\n")  # room: written by the caller
        assert os.read(read, 100) == b"first\n"
        big = b"B" * (1 << 20) + b"\n"  # more than the pipe holds: the thread blocks on it

        def put_all() -> None:
            writer.put(big)
            for i in range(200):
                writer.put(b"%d\n" % i)

        putter = threading.Thread(target=put_all, daemon=True)
        putter.start()
        putter.join(REPLY_TIMEOUT)  # nobody reads the pipe yet: a put that blocked never returns
        assert not putter.is_alive(), "a put call blocked on the full pipe"
        received = bytearray()
        expected = len(big) + sum(len(b"%d\n" % i) for i in range(200))
        while len(received) < expected:
            ready, _, _ = select.select([read], [], [], REPLY_TIMEOUT)
            assert ready, "the writer thread stopped writing"
            received += os.read(read, 1 << 16)
        assert bytes(received) == big + b"".join(b"%d\n" % i for i in range(200))
        writer.put(b"after\n")  # the queue is empty again: the caller writes
        assert os.read(read, 100) == b"after\n"
    finally:
        writer.close(5)
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("nowait", [True, False], ids=["pwritev2-nowait", "poll"])
def test_a_short_reply_to_a_full_pipe_waits_for_the_thread_in_order(nowait: bool) -> None:
    """A short line finds no room (the client is not reading): the caller does not block and
    nothing is lost; the thread writes it, and every line behind it, in order. Both ways of
    asking for room: Linux's RWF_NOWAIT write, and poll (elsewhere, or without the flag)."""
    import fcntl

    from doc_processing_std_tools.launcher.transports.line_writer import LineWriter

    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("the pipe's capacity cannot be read here")
    read, write = os.pipe()
    writer = LineWriter(write, nowait=nowait)
    if nowait and not writer._nowait:
        pytest.skip("no RWF_NOWAIT on this platform")
    try:
        filler = b"F" * fcntl.fcntl(write, fcntl.F_GETPIPE_SZ)
        os.write(write, filler)  # the pipe is full
        lines = [b"%d\n" % i for i in range(50)]
        putter = threading.Thread(target=lambda: [writer.put(line) for line in lines])
        putter.start()
        putter.join(REPLY_TIMEOUT)
        assert not putter.is_alive(), "put blocked on a full pipe"
        received = bytearray()
        expected = filler + b"".join(lines)
        while len(received) < len(expected):
            ready, _, _ = select.select([read], [], [], REPLY_TIMEOUT)
            assert ready, "the writer thread stopped writing"
            received += os.read(read, 1 << 16)
        assert bytes(received) == expected
        assert not writer.broken
    finally:
        writer.close(5)
        os.close(read)
        os.close(write)


def test_the_writer_thread_keeps_no_reply_once_written() -> None:
    """A long reply written by the thread is let go at once: short replies go out without the
    thread, so a reference it kept would hold the long one (a 5 MB read) for good."""
    read, write = os.pipe()
    writer = LineWriter(write)
    try:
        big = b"B" * (1 << 20) + b"\n"  # longer than PIPE_BUF: the thread writes it
        alone = sys.getrefcount(big)
        writer.put(big)
        received = bytearray()
        while len(received) < len(big):
            ready, _, _ = select.select([read], [], [], REPLY_TIMEOUT)
            assert ready, "the writer thread stopped writing"
            received += os.read(read, 1 << 16)
        wait_for(lambda: sys.getrefcount(big) == alone, "the writer thread to let the line go")
    finally:
        writer.close(5)
        os.close(read)
        os.close(write)


def test_stdout_to_a_file_without_rwf_nowait_gets_every_reply_in_order(tmp_path: Path) -> None:
    """A descriptor that refuses RWF_NOWAIT (a regular file or a terminal: EOPNOTSUPP) is not
    taken for a broken one: the line goes out through the thread, and poll asks from then on."""
    from doc_processing_std_tools.launcher.transports.line_writer import LineWriter

    out = tmp_path / "replies.jsonl"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT)
    writer = LineWriter(fd)
    try:
        lines = [b"%d\n" % i for i in range(20)]
        for line in lines:
            writer.put(line)
    finally:
        writer.close(5)
        os.close(fd)
    assert not writer.broken
    assert out.read_bytes() == b"".join(lines)


def test_error_reply_quotes_no_input_and_recovers_the_id() -> None:
    from mcp_types import jsonrpc_message_adapter

    line = json.dumps({"jsonrpc": "2.0", "id": 12, "params": {"x": "y" * 5000}}).encode()
    try:
        jsonrpc_message_adapter.validate_json(line)
    except Exception as exc:
        reply = json.loads(error_reply(line, exc))  # type: ignore[arg-type]
    assert reply["id"] == 12 and reply["error"]["code"] == -32600
    assert "yyyy" not in reply["error"]["message"]
    assert len(reply["error"]["message"]) < 1024


# -- relayed calls to an external stdio server (the fast path, launcher/external/fast_path.py) ---------


@pytest.fixture
def external_wire(tmp_path: Path) -> Iterator[Wire]:
    import sys

    results = SERVERS / "results_server.py"
    path = tmp_path / "external.yaml"
    path.write_text(
        "transport: {type: stdio, shutdown_grace: 3}\n"
        f"servers:\n  ext:\n    command: {sys.executable}\n    args: [{results}]\n"
    )
    with initialized(path) as w:
        yield w


def test_a_relayed_call_is_answered_with_the_clients_own_id(external_wire: Wire) -> None:
    for request_id in ['a "quoted" id \u00e9', -7, 2**70]:
        raw = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "\u2603"}},
            }
        )
        reply = external_wire.request(raw.encode())
        assert reply["id"] == request_id
        assert reply["result"]["content"][0]["text"] == "\u2603"
        assert reply["result"].get("isError") is False


@pytest.mark.slow
def test_unusual_relayed_calls_keep_the_sdk_path_and_get_answers(external_wire: Wire) -> None:
    lone = external_wire.request(external_wire.call(1, "echo", {"text": "\ud800"}))
    assert lone["id"] == 1 and lone["error"]["code"] == -32700
    extra = external_wire.request(
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo",'
        b'"arguments":{"text":"x"},"task":{"ttl":1000}}}'
    )
    assert extra["id"] == 2  # answered one way or another, never left waiting
    bad = external_wire.request(external_wire.call(3, "echo", {"text": 5}))
    assert bad["id"] == 3 and bad["result"]["isError"] is True
    ok = external_wire.request(external_wire.call(4, "echo", {"text": "still here"}))
    assert ok["result"]["content"][0]["text"] == "still here"


@pytest.mark.slow
def test_progress_of_a_relayed_call_carries_the_clients_token(external_wire: Wire) -> None:
    external_wire.send(
        b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"count_to",'
        b'"arguments":{"steps":2},"_meta":{"progressToken":"mine"}}}'
    )
    messages = [external_wire.receive() for _ in range(3)]
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"]) for p in progress] == [("mine", 1), ("mine", 2)]
    assert messages[-1]["id"] == 9 and messages[-1]["result"]["content"][0]["text"] == "counted"


@pytest.mark.slow
def test_eof_right_behind_a_relayed_call_still_gets_its_reply(external_wire: Wire) -> None:
    external_wire.send(external_wire.call(1, "echo", {"text": "last words"}))
    assert external_wire.proc.stdin
    external_wire.proc.stdin.close()
    reply = external_wire.receive()
    assert reply["id"] == 1 and reply["result"]["content"][0]["text"] == "last words"
    assert external_wire.proc.wait(timeout=30) == 0


@pytest.mark.slow
def test_stdin_from_a_regular_file_is_served_by_the_reader_thread(
    config: Path, tmp_path: Path
) -> None:
    """The event loop cannot wait on a regular file: the reader thread serves it instead."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "ping", "arguments": {}},
    }
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(INITIALIZE + b"\n" + json.dumps(call).encode() + b"\n")
    with requests.open("rb") as stdin:
        proc = subprocess.run(
            [*launcher_command(), "--config", str(config)],
            stdin=stdin,
            capture_output=True,
            timeout=120,
            cwd=config.parent,
        )
    assert proc.returncode == 0, proc.stderr
    replies = {r["id"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert replies[1]["result"]["content"][0]["text"] == "pong"


@pytest.mark.slow
def test_odd_lines_that_look_like_relayed_calls_are_answered_and_change_nothing(
    external_wire: Wire,
) -> None:
    odd = [
        b'["tools/call", "notifications/cancelled"]',
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":[1]}}',
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":["echo"],"arguments":{}}}',
        b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo","arguments":[1]}}',
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":["echo"]}',
    ]
    for raw in odd:
        external_wire.send(raw)
    replies = {external_wire.receive()["id"] for _ in range(4)}  # the list: -32600, id null
    assert replies == {None, 5, 6, 7}
    ok = external_wire.request(external_wire.call(8, "echo", {"text": "fine"}))
    assert ok["id"] == 8 and ok["result"]["content"][0]["text"] == "fine"


def test_a_2026_era_request_needs_no_initialize(config: Path) -> None:
    """A stateless request (the connection's keys in its ``_meta``) opens a 2026-era connection:
    it is served, not refused as sent before ``initialize``."""
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    w = Wire(config)
    try:
        params = {"name": "ping", "arguments": {}, "_meta": envelope}
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        reply = w.request(json.dumps(request).encode())
        assert reply["result"]["content"][0]["text"] == "pong", reply
        assert reply["result"]["resultType"] == "complete"
    finally:
        w.close()
