"""Metrics and spans (doc_processing_std_tools/telemetry/): ``GET /metrics`` scraped over real
HTTP from a launched daemon, spans exported over OTLP/HTTP to a fake collector, and, in-process
with the SDK's in-memory exporter, exactly one span per call on every path."""

from __future__ import annotations

import itertools
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from doc_processing_std_tools.embedded_redis import free_port
from doc_processing_std_tools.shared.install_hint import install_extra
from helpers.launch import http_launcher
from helpers.paths import SERVERS
from helpers.redis_server import needs_redis_server, start_redis
from helpers.rpc import open_session, reply_message, request, rpc

EXTERNAL = SERVERS / "external_server.py"
TOKEN = "metrics-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
REQUEST_IDS = itertools.count(100)
SAMPLE = re.compile(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$")


class Collector:
    """A fake OTLP/HTTP collector on 127.0.0.1: keeps each span it is sent."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.paths: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                    ExportTraceServiceRequest,
                )

                body = self.rfile.read(int(self.headers["Content-Length"]))
                export = ExportTraceServiceRequest.FromString(body)
                collector.paths.append(self.path)
                for resource in export.resource_spans:
                    for scope in resource.scope_spans:
                        collector.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of_tool(self, tool: str) -> list[Any]:
        return [s for s in self.spans if _attributes(s).get("dpt.tool") == tool]


def _attributes(span: Any) -> dict[str, str]:
    return {a.key: a.value.string_value for a in span.attributes}


@pytest.fixture(scope="module")
def url_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """external_server.py over streamable HTTP (a ``url:`` server)."""
    port = free_port()
    folder = tmp_path_factory.mktemp("url-server")
    proc = subprocess.Popen(
        [sys.executable, str(EXTERNAL), str(folder / "count"), "--http", str(port)],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the url server never listened"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector | None]:
    """A fake OTLP collector, or None without the otel extra (then the daemon exports nothing)."""
    import importlib.util

    if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is None:
        yield None
        return
    found = Collector()
    yield found
    found.server.shutdown()


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, url_server: str, collector: Collector | None
) -> Iterator[Any]:
    """One HTTP launcher with a token: memory-tools in-process, a command: and a url: server;
    its spans go to *collector*."""
    folder = tmp_path_factory.mktemp("daemon")
    config = folder / "tools.yaml"
    telemetry = (
        f"telemetry: {{otlp_endpoint: 'http://127.0.0.1:{collector.port}', service_name: t}}"
        if collector is not None
        else ""
    )
    config.write_text(
        f"""
transport: {{type: http, auth: {{token: {TOKEN}}}}}
{telemetry}
servers:
  notes:
    server: memory-tools
    settings: {{memory_dir: ./notes}}
  ext:
    command: {sys.executable}
    args: [{EXTERNAL}, {folder / "count"}]
    timeout: 0.5
  web:
    url: {url_server}
    namespace: web
"""
    )
    # (spans leave in batches every 50 ms instead of every 5 s: OTEL_BSP_SCHEDULE_DELAY)
    with http_launcher(config, cwd=folder, env={"OTEL_BSP_SCHEDULE_DELAY": "50"}) as launched:
        launched.session = open_session(launched.port, headers=AUTH)
        yield launched


def call(daemon: Any, tool: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if "meta" in extra:
        params["_meta"] = extra["meta"]
    headers = {**AUTH, **extra.get("headers", {})}
    number = next(REQUEST_IDS)  # (calls may overlap on one session: each its own id)
    reply = rpc(
        daemon.port,
        "tools/call",
        params,
        session=daemon.session,
        headers=headers,
        request_id=number,
    )
    assert reply.status == 200, reply
    return reply_message(reply.headers["content-type"], reply.body, number)["result"]


def scrape(daemon: Any) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``GET /metrics``: (name, its labels) -> value."""
    reply = request(daemon.port, "GET", "/metrics", headers=AUTH)
    assert reply.status == 200, reply
    assert reply.headers["content-type"].startswith("text/plain; version=")
    samples = {}
    for line in reply.body.decode().splitlines():
        match = SAMPLE.match(line)
        if match is None:
            continue
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.mark.slow
def test_metrics_need_the_same_token_as_ready(daemon: Any) -> None:
    assert request(daemon.port, "GET", "/metrics").status == 401
    assert request(daemon.port, "GET", "/ready").status == 401
    wrong = {"Authorization": "Bearer not-the-token"}
    assert request(daemon.port, "GET", "/metrics", headers=wrong).status == 401
    assert request(daemon.port, "GET", "/metrics", headers=AUTH).status == 200


def test_calls_on_each_path_are_counted_with_their_outcome_and_latency(daemon: Any) -> None:
    before = scrape(daemon)
    assert call(daemon, "write_memory", {"key": "a.md", "value": "x"})["isError"] is False
    assert call(daemon, "read_memory", {"key": "missing.md"})["isError"] is True
    assert call(daemon, "bump", {})["isError"] is False  # command: server, relayed
    assert call(daemon, "web_whoami", {})["isError"] is False  # url: server, relayed
    after = scrape(daemon)

    def grew(name: str, by: float = 1.0, **labels: str) -> bool:
        return value(after, name, **labels) - value(before, name, **labels) == by

    calls = "dpt_tool_calls_total"
    assert grew(calls, server="notes", tool="write_memory", outcome="ok")
    assert grew(calls, server="notes", tool="read_memory", outcome="tool_error")
    assert grew(calls, server="ext", tool="bump", outcome="ok")
    assert grew(calls, server="web", tool="web_whoami", outcome="ok")
    latency = "dpt_tool_call_duration_seconds_count"
    for server, tool in [("notes", "write_memory"), ("ext", "bump"), ("web", "web_whoami")]:
        assert grew(latency, server=server, tool=tool)
        assert value(after, "dpt_tool_call_duration_seconds_sum", server=server, tool=tool) > 0
        inf = value(
            after, "dpt_tool_call_duration_seconds_bucket", server=server, tool=tool, le="+Inf"
        )
        assert inf == value(after, latency, server=server, tool=tool)
    # bump changes state: the launcher holds the process lock for it; memory-tools takes it itself
    assert grew("dpt_lock_wait_seconds_count", server="ext")
    assert grew("dpt_lock_wait_seconds_count", server="notes")
    assert value(after, "dpt_external_server_state", server="ext", state="up") == 1
    assert value(after, "dpt_external_server_state", server="web", state="restarting") == 0
    assert value(after, "dpt_external_server_restarts_total", server="web") == 0
    assert value(after, "dpt_open_sessions") >= 1
    assert value(after, "dpt_open_connections") >= 1


def test_a_call_past_its_timeout_is_counted_as_one(daemon: Any) -> None:
    before = scrape(daemon)
    result = call(daemon, "nap", {"seconds": 5})
    assert result["isError"] is True and "timeout" in result["content"][0]["text"]
    after = scrape(daemon)
    labels = {"server": "ext", "tool": "nap", "outcome": "timeout"}
    assert (
        value(after, "dpt_tool_calls_total", **labels)
        - value(before, "dpt_tool_calls_total", **labels)
        == 1
    )


def test_a_store_fault_is_counted_once_for_its_call() -> None:
    """A tool's store error raised while handling an OSError of the store (memory-tools' way)
    counts in dpt_store_errors_total of the call's server; a missing file does not."""
    import errno

    from doc_processing_std_tools.shared.server_module import tool_errors
    from doc_processing_std_tools.telemetry import Telemetry

    class StoreError(Exception):
        pass

    @tool_errors(StoreError)
    def failing(error: OSError) -> str:
        try:
            raise error
        except OSError:
            raise StoreError("Cannot write k.md: Input/output error") from None

    telemetry = Telemetry()
    metrics = telemetry.enable_metrics()
    assert metrics is not None
    for error in (OSError(errno.EIO, "I/O"), FileNotFoundError(errno.ENOENT, "no such file")):
        record = telemetry.begin("notes", "write_memory")
        record.enter()
        with pytest.raises(Exception, match="Cannot write"):
            failing(error)
        record.end("tool_error")
    text = metrics.render()[0].decode()
    assert 'dpt_store_errors_total{server="notes"} 1.0' in text
    assert (
        'dpt_tool_calls_total{outcome="tool_error",server="notes",tool="write_memory"} 2.0' in text
    )


@needs_redis_server
async def test_memory_tools_redis_store_errors_are_counted(
    write_config: Any, tmp_path: Path
) -> None:
    """memory-tools on a Redis that goes away while it serves (in-process, through fastmcp):
    the write it refuses (a RedisStoreError) counts as a store error of its server, like a
    failing disk, and as a tool_error call."""
    from fastmcp import Client

    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config
    from doc_processing_std_tools.telemetry import Telemetry

    pytest.importorskip("redis")
    (tmp_path / "redis").mkdir()
    proc, port = start_redis(tmp_path / "redis")
    config = write_config(
        "servers:\n  notes:\n    server: memory-tools\n"
        f"    settings: {{backend: redis, url: 'redis://127.0.0.1:{port}/0'}}\n"
    )
    telemetry = Telemetry()
    metrics = telemetry.enable_metrics()
    assert metrics is not None
    composition = await compose(load_config(config), telemetry=telemetry)
    try:
        async with Client(composition.root) as client:
            arguments = {"key": "k", "value": "v"}
            saved = await client.call_tool("write_memory", arguments, raise_on_error=False)
            assert not saved.is_error, saved.content[0].text
            proc.terminate()
            proc.wait(timeout=10)
            refused = await client.call_tool("write_memory", arguments, raise_on_error=False)
    finally:
        await composition.aclose()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert refused.is_error and "Cannot reach Redis" in refused.content[0].text
    text = metrics.render()[0].decode()
    assert 'dpt_store_errors_total{server="notes"} 1.0' in text
    assert (
        'dpt_tool_calls_total{outcome="tool_error",server="notes",tool="write_memory"} 1.0' in text
    )


@pytest.mark.slow  # (popoto-memory gives up on a Redis that is not there after a few seconds)
def test_an_unreachable_redis_is_counted_as_a_store_error(tmp_path: Path) -> None:
    pytest.importorskip("popoto")
    config = tmp_path / "tools.yaml"
    config.write_text(
        f"""
transport: {{type: http, auth: {{token: {TOKEN}}}}}
servers:
  recall:
    server: popoto-memory
    settings: {{backend: redis, url: "redis://127.0.0.1:{free_port()}/1", agent_id: m}}
"""
    )
    with http_launcher(config, cwd=tmp_path) as launched:
        launched.session = open_session(launched.port, headers=AUTH)  # type: ignore[attr-defined]
        assert call(launched, "memory_search", {"query": "anything"})["isError"] is True
        after = scrape(launched)
    assert value(after, "dpt_store_errors_total", server="recall") == 1
    outcome = {"server": "recall", "tool": "memory_search", "outcome": "tool_error"}
    assert value(after, "dpt_tool_calls_total", **outcome) == 1


@pytest.mark.slow  # (a call holds the process lock for 3 s)
def test_a_call_that_waits_out_its_timeout_for_the_lock_is_a_lock_timeout(daemon: Any) -> None:
    """web_hold (a url: server's tool that changes state) holds the process lock for 3 s; bump
    (timeout 0.5 s) waits for it until its timeout: a lock_timeout, and a lock wait."""
    before = scrape(daemon)
    holder = threading.Thread(target=call, args=(daemon, "web_hold", {"seconds": 3}))
    holder.start()
    try:
        deadline = time.monotonic() + 2.5
        while not (result := call(daemon, "bump", {}))["isError"]:  # (until the hold has it)
            assert time.monotonic() < deadline, "bump never waited for the lock"
    finally:
        holder.join()
    assert "held the process lock" in result["content"][0]["text"]
    after = scrape(daemon)
    labels = {"server": "ext", "tool": "bump", "outcome": "lock_timeout"}
    name = "dpt_tool_calls_total"
    assert value(after, name, **labels) - value(before, name, **labels) == 1
    waits = "dpt_lock_wait_seconds_bucket"
    assert value(after, waits, server="ext", le="0.1") - value(
        before, waits, server="ext", le="0.1"
    ) < (
        value(after, waits, server="ext", le="+Inf") - value(before, waits, server="ext", le="+Inf")
    )  # (the wait of about 0.5 s is in no bucket below 0.5)


def spans_once_exported(collector: Collector, daemon: Any, tools: list[str]) -> dict[str, list]:
    """The spans of the calls of *tools* made just before, once the span of a later call (a
    ``whoami``) has reached the collector: a second span of any of them would have come first
    (the launcher exports its spans in the order they end, one batch after the other)."""
    marked = len(collector.of_tool("whoami"))
    assert call(daemon, "whoami", {})["isError"] is False
    deadline = time.monotonic() + 20
    while len(collector.of_tool("whoami")) <= marked:
        assert time.monotonic() < deadline, f"no span for the later call: {collector.spans}"
        time.sleep(0.05)
    return {tool: collector.of_tool(tool) for tool in tools}


def test_spans_reach_the_otlp_endpoint_with_the_incoming_trace_as_parent(
    daemon: Any, collector: Collector | None
) -> None:
    if collector is None:
        pytest.skip("needs the otel extra")
    call(daemon, "list_memory_keys", {}, headers={"traceparent": TRACEPARENT})
    call(daemon, "web_nap", {"seconds": 0}, meta={"traceparent": TRACEPARENT})
    exported = spans_once_exported(collector, daemon, ["list_memory_keys", "web_nap"])
    for tool, server in [("list_memory_keys", "notes"), ("web_nap", "web")]:
        (span,) = exported[tool]
        assert _attributes(span) == {"dpt.server": server, "dpt.tool": tool, "dpt.outcome": "ok"}
        assert span.trace_id.hex() == TRACE_ID
        assert span.parent_span_id.hex() == PARENT_ID
        assert span.name == f"tools/call {tool}"
    assert set(collector.paths) == {"/v1/traces"}


# -- in-process: the SDK's in-memory exporter, every path -------------------------------------


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("popoto")
    from helpers.redis_server import REDIS_SERVER, SKIP_REASON, start_redis

    if REDIS_SERVER is None:
        pytest.skip(SKIP_REASON)
    proc, port = start_redis(tmp_path_factory.mktemp("redis"))
    yield f"redis://127.0.0.1:{port}/1"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


def in_memory_tracing() -> tuple[Any, Any]:
    """(a Telemetry whose spans go to the SDK's in-memory exporter, that exporter)."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from doc_processing_std_tools.telemetry import Telemetry, Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry(Tracing(provider)), exporter


async def on_the_fast_path(
    root: Any, calls: list[tuple[str, dict[str, Any], dict[str, Any]]]
) -> None:
    """Each call, one after the other, taken by the stdio fast path of *root* (as the stdio
    transport hands it lines); fails unless the fast path takes it and answers it. The replies."""
    from doc_processing_std_tools.launcher.external.relay import fast_path_of

    fast = fast_path_of(root)
    assert fast is not None
    replies: list[dict[str, Any]] = []

    def nothing(_request_id: Any) -> None:
        pass

    async with anyio.create_task_group() as group:
        fast.bind(group, lambda line: replies.append(json.loads(line)), nothing, nothing)
        fast.enabled = True
        for number, (tool, arguments, meta) in enumerate(calls, start=1):
            params = {"name": tool, "arguments": arguments, "_meta": meta}
            line = json.dumps(
                {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params}
            )
            assert fast.take(line.encode(), on_loop=True), tool
            with anyio.fail_after(30):
                while len(replies) < number:
                    await anyio.sleep(0.01)
        group.cancel_scope.cancel()
    return replies


def check_spans(exporter: Any, expected: dict[str, tuple[str, int]]) -> None:
    """Exactly *expected* spans ({tool: (server, how many)}), each ok, each a child of the
    call's traceparent."""
    spans = exporter.get_finished_spans()
    found: dict[str, tuple[str, int]] = {}
    for span in spans:
        tool = span.attributes["dpt.tool"]
        found[tool] = (span.attributes["dpt.server"], found.get(tool, ("", 0))[1] + 1)
        assert span.attributes["dpt.outcome"] == "ok", span.attributes
        assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT_ID
        assert f"{span.context.trace_id:032x}" == TRACE_ID
        assert span.name == f"tools/call {tool}"
    assert found == expected


async def test_every_path_makes_exactly_one_span_per_call(
    write_config: Any, tmp_path: Path
) -> None:
    """In-process (memory-tools, through fastmcp), relayed to a command: server through the SDK,
    and the stdio fast path's relayed calls, with and without a progress token: one span each, its parent the call's ``_meta`` traceparent."""
    from fastmcp import Client

    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config

    telemetry, exporter = in_memory_tracing()
    config = write_config(
        f"""
servers:
  notes:
    server: memory-tools
    settings: {{memory_dir: {tmp_path / "notes"}}}
  ext:
    command: {sys.executable}
    args: [{EXTERNAL}, {tmp_path / "count"}]
    env: {{DPT_TEST_TRACE_TOOL: "1"}}
"""
    )
    meta = {"traceparent": TRACEPARENT}
    composition = await compose(load_config(config), telemetry=telemetry)
    try:
        async with Client(composition.root) as client:  # (the servers' lifespans run meanwhile)
            await client.call_tool("write_memory", {"key": "k.md", "value": "v"}, meta=meta)
            await client.call_tool("whoami", {}, meta=meta)
            relayed = await client.call_tool("traceparent_seen", {}, meta=meta)
            replies = await on_the_fast_path(
                composition.root,
                [
                    ("bump", {}, meta),
                    ("nap", {"seconds": 0}, {**meta, "progressToken": "p1"}),
                    ("traceparent_seen", {}, meta),
                    ("traceparent_seen", {}, {**meta, "progressToken": "p2"}),
                ],
            )
    finally:
        await composition.aclose()
    # the server behind gets this call's span as its parent, not the client's
    seen = [relayed.content[0].text] + [r["result"]["content"][0]["text"] for r in replies[2:]]
    spans = [
        s for s in exporter.get_finished_spans() if s.attributes["dpt.tool"] == "traceparent_seen"
    ]
    assert sorted(seen) == sorted(f"00-{TRACE_ID}-{span.context.span_id:016x}-01" for span in spans)
    check_spans(
        exporter,
        {
            "write_memory": ("notes", 1),
            "whoami": ("ext", 1),
            "bump": ("ext", 1),
            "nap": ("ext", 1),
            "traceparent_seen": ("ext", 3),
        },
    )


@pytest.mark.slow  # (popoto-memory and a redis-server: two seconds more)
async def test_a_plain_call_on_the_fast_path_makes_one_span(
    write_config: Any, tmp_path: Path, redis_url: str
) -> None:
    from fastmcp import Client

    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config

    telemetry, exporter = in_memory_tracing()
    config = write_config(
        f"""
servers:
  recall:
    server: popoto-memory
    settings: {{backend: redis, url: "{redis_url}", agent_id: spans}}
"""
    )
    meta = {"traceparent": TRACEPARENT}
    composition = await compose(load_config(config), telemetry=telemetry)
    try:
        async with Client(composition.root):
            await on_the_fast_path(
                composition.root,
                [
                    ("memory_save", {"content": "spans are kept"}, meta),
                    ("memory_search", {"query": "spans"}, meta),
                ],
            )
    finally:
        await composition.aclose()
    check_spans(exporter, {"memory_save": ("recall", 1), "memory_search": ("recall", 1)})


def test_importing_the_package_loads_neither_prometheus_nor_opentelemetry() -> None:
    code = (
        "import sys, doc_processing_std_tools.telemetry, doc_processing_std_tools.locking, "
        "doc_processing_std_tools.shared.server_module\n"
        "loaded = [m for m in sys.modules if m.startswith(('opentelemetry', 'prometheus_client'))]\n"
        "assert not loaded, loaded"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_otlp_endpoint_that_is_not_a_url_is_refused_in_one_line(write_config: Any) -> None:
    from doc_processing_std_tools.launcher.config import ConfigError, load_config

    config = write_config(
        "telemetry:\n  otlp_endpoint: collector:4318\nservers:\n  notes:\n    server: memory-tools\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    message = str(caught.value)
    assert ":2: telemetry.otlp_endpoint: " in message and "http://127.0.0.1:4318" in message
    assert "\n" not in message


@pytest.mark.slow  # (the shipped config composed without the extra)
async def test_an_otlp_endpoint_without_the_otel_extra_names_the_extra(
    write_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from doc_processing_std_tools import telemetry
    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import ConfigError, load_config

    def missing(*_args: object) -> None:
        raise ModuleNotFoundError("No module named 'opentelemetry.sdk'", name="opentelemetry.sdk")

    monkeypatch.setattr(telemetry.Tracing, "to_otlp", missing)
    config = write_config(
        "telemetry: {otlp_endpoint: 'http://127.0.0.1:4318'}\n"
        "servers:\n  notes:\n    server: memory-tools\n"
    )
    with pytest.raises(ConfigError) as caught:
        await compose(load_config(config))
    assert str(caught.value).endswith(
        ":1: telemetry.otlp_endpoint: needs the otel extra (opentelemetry.sdk is not installed): "
        f"{install_extra('otel')}"
    )
