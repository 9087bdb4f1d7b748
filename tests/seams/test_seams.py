"""Pins every fastmcp / mcp behaviour that ``doc_processing_std_tools.seams`` relies on beyond
public API.

When a fastmcp upgrade breaks one of these, fix the seams module (and this test), nothing else.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import anyio
import httpx2
import pytest
from fastmcp import Client, Context, FastMCP
from fastmcp.tools import ToolResult
from mcp import ClientSession
from mcp.shared.memory import create_client_server_memory_streams
from mcp_types import ElicitResult, Implementation
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse

from doc_processing_std_tools.launcher.calls.policed_tools import MountRules
from doc_processing_std_tools.launcher.calls.policy import LockMode
from doc_processing_std_tools.launcher.compose.mounting import mounted_provider
from doc_processing_std_tools.launcher.transports.wire_errors import (
    INVALID_REQUEST_TEXT,
    invalid_request,
)
from doc_processing_std_tools.locking import PROCESS_LOCK
from doc_processing_std_tools.seams import (
    client_sessions,
    fastmcp_server,
    fastmcp_tools,
    http_sessions,
    oauth_client,
    server_sessions,
    session_reads,
    stdio_children,
)
from doc_processing_std_tools.shared import tool_call_logs


def child_with_lifespan(events: list[str]) -> FastMCP:
    @asynccontextmanager
    async def lifespan(server: FastMCP):
        events.append("enter")
        yield {}
        events.append("exit")

    child = FastMCP("child", lifespan=lifespan)

    @child.tool
    def write(x: int) -> int:
        return x

    @child.tool(annotations={"readOnlyHint": True})
    def read() -> bool:
        return PROCESS_LOCK.locked()

    return child


def mounted(server: FastMCP, namespace: str | None, needs_lock):
    return mounted_provider(
        server,
        MountRules(
            server="child",
            namespace=namespace,
            admits=lambda name: True,
            lock_mode=lambda tool: LockMode.HELD if needs_lock(tool) else LockMode.NONE,
            timeout=10,
        ),
    )


async def test_lifespan_manager_enters_the_mounted_servers_lifespans() -> None:
    events: list[str] = []
    root = FastMCP("root")
    root.add_provider(mounted(child_with_lifespan(events), None, lambda tool: False))
    async with fastmcp_server.lifespan_manager(root):
        assert events == ["enter"]
    assert events == ["enter", "exit"]


async def test_low_level_server_speaks_the_protocol() -> None:
    """The SDK server behind a FastMCP serves a client session on streams of its own, with the
    server's lifespan entered (how the launcher's stdio transport runs it)."""
    server = FastMCP("x")

    @server.tool
    def ping() -> str:
        return "pong"

    low = fastmcp_server.low_level_server(server)
    async with (
        fastmcp_server.lifespan_manager(server),
        create_client_server_memory_streams() as (client_streams, server_streams),
        anyio.create_task_group() as group,
    ):
        group.start_soon(low.run, *server_streams, low.create_initialization_options())
        async with ClientSession(*client_streams) as session:
            await session.initialize()
            result = await session.call_tool("ping", {})
        group.cancel_scope.cancel()
    assert not result.is_error and result.content[0].text == "pong"


async def test_mounted_provider_namespaces_and_locks_only_what_it_is_told() -> None:
    root = FastMCP("root")
    provider = mounted(child_with_lifespan([]), "ns", lambda tool: tool.name == "write")
    root.add_provider(provider)
    tools = {tool.name: tool for tool in await provider.list_tools()}
    assert set(tools) == {"ns_write", "ns_read"}
    assert tools["ns_write"].policy.rules.lock is LockMode.HELD
    assert tools["ns_read"].policy.rules.lock is LockMode.NONE
    assert tools["ns_write"].policy.rules.tool == "ns_write"
    async with Client(root) as client:
        assert (await client.call_tool("ns_write", {"x": 3})).data == 3  # via RunsAround._run
        assert (await client.call_tool("ns_read", {})).data is False
    assert not PROCESS_LOCK.locked()


async def test_the_server_calls_a_tool_through_its_private_run() -> None:
    """RunsAround overrides ``Tool._run``, the server's entry point: pin that it is the one called."""
    calls: list[str] = []
    root = FastMCP("root")

    @root.tool
    def ping() -> str:
        return "pong"

    tool = await root.get_tool("ping")
    original = type(tool)._run

    async def spy(self, arguments):
        calls.append(self.name)
        return await original(self, arguments)

    type(tool)._run = spy
    try:
        async with Client(root) as client:
            await client.call_tool("ping", {})
    finally:
        type(tool)._run = original
    assert calls == ["ping"]


def test_the_session_manager_gives_each_transport_its_own_event_stream_prefix() -> None:
    from fastmcp.server.event_store import EventStore

    shared = EventStore()
    sessions = http_sessions.session_manager(
        event_store=shared, app=fastmcp_server.low_level_server(FastMCP("x"))
    )
    first, second = sessions.event_store, sessions.event_store  # what the SDK reads per transport
    assert first._event_store is shared and second._event_store is shared
    assert first._stream_prefix != second._stream_prefix
    assert (
        http_sessions.session_manager(app=fastmcp_server.low_level_server(FastMCP("x"))).event_store
        is None
    )


async def test_additional_http_routes_serve_the_servers_custom_routes() -> None:
    """A mounted server's ``custom_route`` is among the routes, and answers when served."""
    server = FastMCP("x")

    @server.custom_route("/hello", methods=["GET"])
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hi")

    app = Starlette(routes=fastmcp_server.additional_http_routes(server))
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://test") as client:
        reply = await client.get("/hello")
    assert (reply.status_code, reply.text) == (200, "hi")


def test_only_servers_with_fastmcp_defaults_are_served_through_their_providers() -> None:
    from contextlib import asynccontextmanager

    from fastmcp.server.middleware import Middleware

    assert fastmcp_server.behaves_as_default(FastMCP("plain"))
    assert not fastmcp_server.behaves_as_default(FastMCP("masked", mask_error_details=True))
    assert not fastmcp_server.behaves_as_default(FastMCP("strict", strict_input_validation=True))
    assert not fastmcp_server.behaves_as_default(FastMCP("mw", middleware=[Middleware()]))

    @asynccontextmanager
    async def lifespan(server):
        yield {}

    assert not fastmcp_server.behaves_as_default(FastMCP("life", lifespan=lifespan))
    hidden = FastMCP("hidden")
    hidden.disable(names={"x"})
    assert not fastmcp_server.behaves_as_default(hidden)


async def test_send_raw_request_returns_the_result_dict_and_relays_progress() -> None:
    """``ClientSession._stamp`` and ``_dispatcher.send_raw_request``: the wire result, untouched."""
    server = FastMCP("raw")

    @server.tool
    async def count(steps: int, ctx: Context) -> ToolResult:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps)
        return ToolResult(structured_content={"n": steps}, meta={"kept": True})

    reports: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append(progress)

    async with Client(server, mode="legacy") as client:
        raw = await client_sessions.send_raw_request(
            client,
            "tools/call",
            {"name": "count", "arguments": {"steps": 2}},
            on_progress=on_progress,
        )
    assert isinstance(raw, dict)
    assert raw["structuredContent"] == {"n": 2} and raw["_meta"] == {"kept": True}
    assert raw.get("isError", False) is False
    assert reports == [1, 2]


async def test_requests_in_flight_counts_what_waits_for_a_reply() -> None:
    """``JSONRPCDispatcher._pending``: a request is counted from its sending to its reply."""
    import anyio

    server = FastMCP("busy")
    release = anyio.Event()

    @server.tool
    async def wait() -> str:
        await release.wait()
        return "ok"

    async with Client(server, mode="legacy") as client, anyio.create_task_group() as group:
        assert client_sessions.requests_in_flight(client) == 0
        group.start_soon(client.call_tool, "wait", {})
        with anyio.fail_after(10):
            while client_sessions.requests_in_flight(client) != 1:
                await anyio.sleep(0.01)
        release.set()
        with anyio.fail_after(10):
            while client_sessions.requests_in_flight(client):
                await anyio.sleep(0.01)


async def test_server_middleware_added_first_sees_raw_params_and_may_answer_alone() -> None:
    """``Server.middleware`` (mcp 2, provisional): first in the chain, before fastmcp's dispatch."""
    server = FastMCP("mw")

    @server.tool
    def echo(text: str) -> str:
        return text

    seen: list[tuple[str, object]] = []

    async def answer(ctx, call_next):
        seen.append((ctx.method, ctx.params))
        if ctx.method == "tools/call" and ctx.params["name"] == "short":
            return {"content": [{"type": "text", "text": "answered"}], "isError": False}
        return await call_next(ctx)

    fastmcp_server.add_server_middleware(server, answer)
    async with Client(server, mode="legacy") as client:
        short = await client.call_tool_mcp("short", {"x": 1})
        assert short.content[0].text == "answered"
        assert (await client.call_tool("echo", {"text": "hi"})).data == "hi"
    calls = [params for method, params in seen if method == "tools/call"]
    assert calls[0]["name"] == "short" and calls[0]["arguments"] == {"x": 1}
    assert calls[1]["name"] == "echo"


async def test_a_stdio_child_is_spawned_with_pipes_and_stopped_even_if_it_ignores_eof() -> None:
    import os
    import sys

    import anyio

    script = (
        "import sys, time\n"
        "sys.stdout.write(sys.stdin.readline()); sys.stdout.flush()\n"
        "time.sleep(60)  # ignores stdin's EOF: only the escalation stops it\n"
    )
    with open(os.devnull, "w") as errlog:
        process = await stdio_children.spawn_stdio_child(
            sys.executable, ["-c", script], dict(os.environ), errlog, None
        )
    with anyio.fail_after(30):
        assert os.getpgid(process.pid) == process.pid  # its own process group
        await process.stdin.send(b"hello\n")
        assert await process.stdout.receive() == b"hello\n"
        await stdio_children.stop_stdio_child(process)
    assert process.returncode is not None


async def test_initialize_accepted_reads_the_sdks_request_gate() -> None:
    """The relay serves a call only when the SDK would (``ServerRunner``'s gate): true in a
    tool call of an initialized session."""
    server = FastMCP("gate")
    seen: list[bool] = []

    @server.tool
    def gate(ctx: Context) -> bool:
        seen.append(server_sessions.initialize_accepted(ctx.session))
        return seen[-1]

    async with Client(server) as client:
        await client.call_tool("gate", {})
    assert seen == [True]


async def test_request_sources_and_client_name_read_the_request_being_served() -> None:
    """The audit log's who and where: the request's ``_meta`` and session (headers over HTTP
    only), and the client's name from its ``initialize``."""
    server = FastMCP("sources")
    seen: list[Any] = []

    @server.tool
    def look() -> str:
        meta, headers, session = fastmcp_server.request_sources()
        seen.append((meta, headers, server_sessions.client_name(session)))
        return "seen"

    assert fastmcp_server.request_sources() == (None, None, None)
    async with Client(server, client_info=Implementation(name="seer", version="1")) as client:
        await client.call_tool("look", {}, meta={"traceparent": "00-x"})
    [(meta, headers, name)] = seen
    assert (meta["traceparent"], headers, name) == ("00-x", None, "seer")
    assert server_sessions.client_name(None) is None


async def test_local_tools_are_the_stored_objects_and_retyping_changes_the_call() -> None:
    from fastmcp.tools.function_tool import FunctionTool

    server = FastMCP("x")

    @server.tool
    def double(x: int) -> int:
        return 2 * x

    (tool,) = fastmcp_tools.local_tools(server)
    assert type(tool) is FunctionTool and tool.name == "double"

    class Tripled(FunctionTool):
        async def run(self, arguments):
            result = await super().run(arguments)
            return ToolResult(
                structured_content={"result": result.structured_content["result"] + 1}
            )

    fastmcp_tools.retype_tool(tool, Tripled)
    assert type(await server.get_tool("double")) is Tripled
    async with Client(server) as client:
        assert (await client.call_tool("double", {"x": 3})).data == 7


CONNECTION_SERVER = """\
from fastmcp import Context, FastMCP

from doc_processing_std_tools.seams import server_sessions

server = FastMCP("conn")


@server.tool
def connection(ctx: Context) -> str:
    found = server_sessions.session_connection(ctx.session)
    state = found.state
    state["calls"] = state.get("calls", 0) + 1
    return f"{id(found)} {state['calls']}"
"""


async def test_session_connection_is_one_object_per_stdio_client_with_a_state_dict(
    tmp_path,
) -> None:
    """Over stdio (one connection per client) every call sees the same connection and state."""
    from helpers.launch import launched, text_of

    (tmp_path / "conn_server.py").write_text(CONNECTION_SERVER)
    config = tmp_path / "tools.yaml"
    config.write_text("servers:\n  conn:\n    module: conn_server:server\n")
    seen: list[list[str]] = []
    for _ in range(2):
        async with launched(config) as session:
            seen.append([text_of(await session.call_tool("connection", {})) for _ in range(2)])
    (first, again), (other, _) = [[text.split() for text in pair] for pair in seen]
    assert first[0] == again[0] and (first[1], again[1]) == ("1", "2")
    assert other[1] == "1"


async def test_failed_tool_calls_are_logged_by_one_logger_with_the_error_at_hand(caplog) -> None:
    """fastmcp logs ``Error calling tool`` on TOOL_CALL_LOGGER, a ``ToolError`` at its
    ``log_level`` while it is being handled, any other exception with ``exc_info``."""
    import logging

    from fastmcp.exceptions import ToolError

    from doc_processing_std_tools.shared.argument_errors import refused

    server = FastMCP("x")

    @server.tool
    def refuse() -> str:
        raise refused("no such key: k")

    @server.tool
    def fail() -> str:
        raise ToolError("Error calling tool 'fail': the connection closed")

    @server.tool
    def crash() -> str:
        raise RuntimeError("bug\nsecond line")

    tool_call_logs.quiet_tool_call_logs()
    tool_call_logs.quiet_tool_call_logs()
    fastmcp_log = logging.getLogger(tool_call_logs.TOOL_CALL_LOGGER)
    assert len(fastmcp_log.filters) == 1
    caplog.set_level(logging.DEBUG, logger="doc_processing_std_tools.tools")
    fastmcp_log.setLevel(logging.DEBUG)
    try:
        async with Client(server) as client:
            for name in ("refuse", "fail", "crash"):
                assert (await client.call_tool(name, {}, raise_on_error=False)).is_error
    finally:
        fastmcp_log.setLevel(logging.NOTSET)
    ours = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "doc_processing_std_tools.tools" and not r.exc_info
    ]
    assert ours == [
        ("DEBUG", "Error calling tool 'refuse': refused (an error result, as the tool means to)"),
        ("WARNING", "Error calling tool 'fail': the connection closed"),
        ("ERROR", "Error calling tool 'crash': RuntimeError: bug second line"),
    ]
    assert not [r for r in caplog.records if r.name == tool_call_logs.TOOL_CALL_LOGGER]


async def test_raw_callbacks_answer_server_requests_unchanged_and_are_declared() -> None:
    """``answer_server_requests``: the session declares sampling, elicitation and roots, and a
    callback's MCPError reaches the server with its own code (fastmcp's handlers make -32603)."""
    import warnings

    import mcp_types
    from mcp.shared.exceptions import MCPError

    server = FastMCP("asker")

    @server.tool
    async def ask(ctx: Context) -> str:
        declared = ctx.session.client_capabilities
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                await ctx.session.list_roots()
            except MCPError as exc:
                said = f"{exc.error.code}: {exc.error.message}"
        assert declared is not None
        kinds = [k for k in ("sampling", "elicitation", "roots") if getattr(declared, k)]
        return f"{kinds} {declared.roots.list_changed if declared.roots else None} {said}"

    async def refuse(*_args: object) -> mcp_types.ErrorData:
        raise MCPError(-32042, "not here")

    client = Client(server, mode="legacy")
    client_sessions.answer_server_requests(
        client, sampling=refuse, elicitation=refuse, roots=refuse
    )
    async with client:
        result = await client.call_tool("ask", {})
    assert result.data == "['sampling', 'elicitation', 'roots'] True -32042: not here"


async def test_only_the_callbacks_given_are_declared() -> None:
    """``answer_server_requests`` with None for some: the session declares only the others
    (a client's own session tells the server what its client declared)."""
    server = FastMCP("asker")

    @server.tool
    async def declared(ctx: Context) -> str:
        caps = ctx.session.client_capabilities
        assert caps is not None
        return str([k for k in ("sampling", "elicitation", "roots") if getattr(caps, k)])

    async def never(*_args: object) -> None:
        raise AssertionError("not asked")

    client = Client(server, mode="legacy")
    client_sessions.answer_server_requests(client, sampling=never, elicitation=None, roots=None)
    async with client:
        result = await client.call_tool("declared", {})
    assert result.data == "['sampling']"


async def test_outside_requests_hides_the_request_being_served() -> None:
    """A task started under ``outside_requests`` while a request is served sees none."""
    server = FastMCP("outside")
    seen: list[Any] = []

    @server.tool
    def look() -> str:
        with fastmcp_server.outside_requests():
            seen.append(fastmcp_server.request_sources())
        seen.append(fastmcp_server.request_sources()[2] is not None)
        return "seen"

    async with Client(server) as client:
        await client.call_tool("look", {})
    assert seen == [(None, None, None), True]


async def test_the_state_store_is_built_on_its_first_write_and_keeps_what_is_written() -> None:
    """Reads before any write answer None without building it; then fastmcp's own store serves."""
    from fastmcp.server.server import StateValue

    server = FastMCP("state")
    fastmcp_server.defer_state_store(server)
    deferred = server._state_store
    assert isinstance(deferred, fastmcp_server.StateStoreOnFirstWrite)
    async with Client(server) as client:
        await client.list_tools()
    assert await deferred.get(key="k") is None
    assert deferred._store is None
    await deferred.put(key="k", value=StateValue(value=1))
    assert not isinstance(server._state_store, fastmcp_server.StateStoreOnFirstWrite)
    assert (await server._state_store.get(key="k")).value == 1
    assert (await deferred.get(key="k")).value == 1


def test_a_state_store_given_to_fastmcp_is_not_deferred() -> None:
    from key_value.aio.stores.memory import MemoryStore

    server = FastMCP("given", session_state_store=MemoryStore())
    fastmcp_server.defer_state_store(server)
    assert not isinstance(server._state_store, fastmcp_server.StateStoreOnFirstWrite)


async def test_client_log_level_is_what_the_client_set() -> None:
    import warnings

    server = FastMCP("levels")

    @server.tool
    def level(ctx: Context) -> str:
        return str(fastmcp_server.client_log_level(ctx.session))

    async with Client(server, mode="legacy") as client:
        assert (await client.call_tool("level", {})).data == "None"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.set_logging_level("warning")
        assert (await client.call_tool("level", {})).data == "warning"


async def test_own_uri_reverses_the_namespace_fastmcp_puts_on_a_resource() -> None:
    child = FastMCP("child")

    @child.resource("note://a/b")
    def note() -> str:
        return "n"

    listed = await mounted(child, "ns", lambda tool: False).list_resources()
    exposed = str(listed[0].uri)
    assert exposed != "note://a/b"
    assert fastmcp_server.own_uri("ns", exposed) == "note://a/b"
    assert fastmcp_server.own_uri(None, "note://a/b") == "note://a/b"
    assert fastmcp_server.exposed_uri("ns", "note://a/b") == exposed
    assert fastmcp_server.exposed_uri(None, "note://a/b") == "note://a/b"


def test_a_uri_matches_a_template_as_fastmcp_reads_it() -> None:
    assert fastmcp_server.template_matches("note://ns/{key}", "note://ns/today")
    assert fastmcp_server.template_matches("file:///{path*}", "file:///a/b/c")
    assert not fastmcp_server.template_matches("note://ns/{key}", "note://other/today")


async def test_own_name_reverses_the_namespace_fastmcp_puts_on_a_prompt() -> None:
    child = FastMCP("child")

    @child.prompt
    def greet() -> str:
        return "hi"

    root = FastMCP("root")
    root.mount(child, namespace="ns")
    (listed,) = await root.list_prompts()
    assert listed.name == fastmcp_server.namespaced_name("ns", "greet")
    assert fastmcp_server.own_name("ns", listed.name) == "greet"
    assert fastmcp_server.own_name("ns", "other_greet") == "other_greet"
    assert fastmcp_server.own_name(None, "greet") == "greet"


class _Stored:
    """The storage ``oauth_client.oauth_client_provider`` reads: a login loaded at start."""

    def __init__(self, refresh_at: float, discovered: dict | None) -> None:
        from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

        self.tokens = OAuthToken(access_token="old", refresh_token="r1", expires_in=3600)
        self.client = OAuthClientInformationFull(
            client_id="c", redirect_uris=["http://127.0.0.1/callback"]
        )
        self._refresh_at, self._discovered = refresh_at, discovered
        self.kept: list[dict] = []
        self.discovery: object = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens) -> None:
        self.tokens = tokens
        self.kept.append(self.discovery())  # type: ignore[operator]

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info) -> None:
        self.client = client_info

    async def refresh_at(self) -> float:
        return self._refresh_at

    async def discovered(self) -> dict | None:
        return self._discovered


def _oauth_provider(storage: _Stored, refused: list[str]) -> object:
    from mcp.shared.auth import OAuthClientMetadata

    async def on_refused(*_: object) -> None:
        refused.append("refused")
        raise RuntimeError("needs a login")

    return oauth_client.oauth_client_provider(
        "https://mcp.example/mcp",
        OAuthClientMetadata(redirect_uris=["http://127.0.0.1/callback"]),
        storage,
        redirect_handler=on_refused,
        callback_handler=on_refused,  # type: ignore[arg-type]
        refused=on_refused,
        margin=lambda lifetime: lifetime / 5,
    )


async def test_an_oauth_login_loaded_due_for_refresh_is_refreshed_at_the_stored_token_endpoint() -> (
    None
):
    """``OAuthClientProvider._initialize`` + ``context`` fields: a stored token past its refresh
    time is refreshed before the request, at the stored authorization server's token endpoint,
    with the RFC 8707 resource; the new token's expiry is moved a fifth of its life early."""
    import time
    from urllib.parse import parse_qs

    import httpx2

    seen: list[tuple[str, str, dict]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        form = parse_qs(request.content.decode()) if request.method == "POST" else {}
        seen.append((str(request.url), request.headers.get("authorization", ""), form))
        if str(request.url) == "https://as.example/token":
            body = {"access_token": "new", "token_type": "Bearer", "expires_in": 100}
            return httpx2.Response(200, json=body)
        return httpx2.Response(200, json={"ok": True})

    discovered = {
        "as": {
            "issuer": "https://as.example/",
            "authorization_endpoint": "https://as.example/authorize",
            "token_endpoint": "https://as.example/token",
        },
        "prm": {
            "resource": "https://mcp.example/mcp",
            "authorization_servers": ["https://as.example/"],
        },
        "as_url": "https://as.example/",
    }
    storage = _Stored(refresh_at=time.time() - 1, discovered=discovered)
    refused: list[str] = []
    provider = _oauth_provider(storage, refused)
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(answer)) as client:
        reply = await client.post("https://mcp.example/mcp", json={}, auth=provider)  # type: ignore[arg-type]
    assert reply.status_code == 200 and not refused
    token_url, _, form = seen[0]
    assert token_url == "https://as.example/token"
    assert form["grant_type"] == ["refresh_token"] and form["refresh_token"] == ["r1"]
    assert form["resource"] == ["https://mcp.example/mcp"]
    assert seen[1][:2] == ("https://mcp.example/mcp", "Bearer new")
    assert storage.tokens.refresh_token == "r1"  # (kept: the server did not rotate it)
    assert storage.kept[0]["as"]["token_endpoint"] == "https://as.example/token"
    expiry = provider.context.token_expiry_time  # type: ignore[attr-defined]
    assert time.time() + 70 < expiry < time.time() + 81  # 100 s, a fifth early


async def test_an_oauth_401_refreshes_once_and_a_refused_refresh_calls_refused() -> None:
    """``_perform_authorization`` and ``_handle_token_response``: a 401 with a refresh token held
    refreshes (no browser); when the authorization server refuses, *refused* is awaited."""
    import time

    import httpx2

    for token_answer, expect_refused in ((200, False), (400, True)):
        calls: list[str] = []

        def answer(
            request: httpx2.Request, token_answer: int = token_answer, calls: list[str] = calls
        ) -> httpx2.Response:
            url = str(request.url)
            calls.append(url)
            if url == "https://mcp.example/mcp":
                if request.headers.get("authorization") == "Bearer new":
                    return httpx2.Response(200, json={"ok": True})
                return httpx2.Response(401, headers={"WWW-Authenticate": "Bearer"})
            if "oauth-protected-resource" in url:
                return httpx2.Response(
                    200,
                    json={
                        "resource": "https://mcp.example/mcp",
                        "authorization_servers": ["https://as.example/"],
                    },
                )
            if "oauth-authorization-server" in url:
                return httpx2.Response(
                    200,
                    json={
                        "issuer": "https://as.example/",
                        "authorization_endpoint": "https://as.example/authorize",
                        "token_endpoint": "https://as.example/token",
                    },
                )
            if url == "https://as.example/token" and token_answer == 200:
                body = {"access_token": "new", "token_type": "Bearer", "expires_in": 100}
                return httpx2.Response(200, json=body)
            return httpx2.Response(token_answer, json={"error": "invalid_grant"})

        storage = _Stored(refresh_at=time.time() + 3000, discovered=None)
        refused: list[str] = []
        provider = _oauth_provider(storage, refused)
        async with httpx2.AsyncClient(transport=httpx2.MockTransport(answer)) as client:
            try:
                reply = await client.post("https://mcp.example/mcp", json={}, auth=provider)  # type: ignore[arg-type]
            except RuntimeError:
                reply = None
        assert "https://as.example/token" in calls
        assert not any("authorize" in url for url in calls)  # never a browser step
        assert bool(refused) is expect_refused
        assert (reply is None) is expect_refused


async def test_oauth_requests_with_a_valid_token_are_in_flight_at_once() -> None:
    """``_auth_flow`` (its ``context.lock`` held across the request): two requests of one
    provider with a valid token both reach the server before either is answered."""
    import time

    import anyio
    import httpx2

    arrived = 0
    both = anyio.Event()

    async def answer(request: httpx2.Request) -> httpx2.Response:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both.set()
        with anyio.move_on_after(10):
            await both.wait()
        return httpx2.Response(200, json={"both": both.is_set()})

    storage = _Stored(refresh_at=time.time() + 3000, discovered=None)
    provider = _oauth_provider(storage, [])
    replies: list[object] = []
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(answer)) as client:

        async def post() -> None:
            reply = await client.post("https://mcp.example/mcp", json={}, auth=provider)  # type: ignore[arg-type]
            replies.append((reply.json(), reply.request.headers["authorization"]))

        async with anyio.create_task_group() as group:
            group.start_soon(post)
            group.start_soon(post)
    assert replies == [({"both": True}, "Bearer old")] * 2


async def test_a_cancelled_request_of_a_session_is_left_unanswered() -> None:
    """The manager's new transport answers a request that settled without a response with
    nothing (the SDK's own ``_terminate_unanswered_request`` sends -32800); the oldest held
    stream ends once more than ``HELD_STREAMS`` are held."""
    sessions = http_sessions.session_manager(app=fastmcp_server.low_level_server(FastMCP("x")))
    transport = sessions._admit_session(None)
    assert transport is not None and not transport.is_json_response_enabled
    for request_id in range(http_sessions.HELD_STREAMS + 1):
        transport._request_streams[str(request_id)] = anyio.create_memory_object_stream(1)
        await transport._terminate_unanswered_request(request_id)
    assert "0" not in transport._request_streams
    assert len(transport._request_streams) == http_sessions.HELD_STREAMS
    for send, receive in transport._request_streams.values():
        send.close()
        receive.close()


class _RecordedReply:
    """A ``post_reply`` that records what the SDK hands it and answers as sse-starlette would."""

    made: ClassVar[list[dict[str, str]]] = []

    def __init__(self, content: Any, sender: Any, headers: dict[str, str]) -> None:
        from sse_starlette import EventSourceResponse

        _RecordedReply.made.append(headers)
        self.response = EventSourceResponse(
            content=content, data_sender_callable=sender, headers=headers
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.response(scope, receive, send)


async def test_a_session_managers_post_reply_answers_each_post_the_sdk_streams() -> None:
    """The SDK builds a POST's SSE response from its module's ``EventSourceResponse`` name with
    the transport's ``_run_sse_writer`` as sender: a manager's ``post_reply`` is built there
    instead (with the response headers), and managers without one keep sse-starlette's."""
    _RecordedReply.made.clear()
    sessions = http_sessions.session_manager(
        app=fastmcp_server.low_level_server(FastMCP("x")), post_reply=_RecordedReply
    )
    plain = http_sessions.session_manager(app=fastmcp_server.low_level_server(FastMCP("y")))
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    headers = {"accept": "application/json, text/event-stream"}
    for manager, made in ((sessions, 1), (plain, 1)):
        async with manager.run():
            transport = httpx2.ASGITransport(app=manager.handle_request)
            async with httpx2.AsyncClient(transport=transport, base_url="http://t") as client:
                reply = await client.post("/mcp", json=initialize, headers=headers)
        assert reply.status_code == 200 and '"protocolVersion"' in reply.text
        assert reply.headers["content-type"].startswith("text/event-stream")
        assert len(_RecordedReply.made) == made
    assert "mcp-session-id" in {name.lower() for name in _RecordedReply.made[0]}


@pytest.mark.parametrize(("body", "request_id"), [(b'{"id": 7}', 7), (b'{"id": [1]}', None)])
async def test_an_invalid_request_is_answered_with_its_readable_id(
    body: bytes, request_id: Any
) -> None:
    """The SDK validates a POST's body with its module's ``jsonrpc_message_adapter`` and
    answers a refusal through ``_create_error_response``: a manager with an
    ``invalid_request`` answers with what it makes of the refused body (the launcher's:
    -32600 with the body's id when readable)."""
    sessions = http_sessions.session_manager(
        app=fastmcp_server.low_level_server(FastMCP("x")), invalid_request=invalid_request
    )
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with sessions.run():
        transport = httpx2.ASGITransport(app=sessions.handle_request)
        async with httpx2.AsyncClient(transport=transport, base_url="http://t") as client:
            reply = await client.post("/mcp", content=body, headers=headers)
    assert reply.status_code == 400
    error = {"code": -32600, "message": INVALID_REQUEST_TEXT}
    assert reply.json() == {"jsonrpc": "2.0", "id": request_id, "error": error}


async def test_raw_requests_and_notifications_reach_the_client_as_written() -> None:
    """``send_raw_to_client`` sends the params as given (no ``mode: form`` added) on the call's
    stream and returns the client's raw answer; ``notify_client`` sends a method the SDK has
    no type for (the client's SDK drops it, unbound: no error on the way)."""
    server = FastMCP("raw")
    asked: list[Any] = []
    noted: list[Any] = []

    @server.tool
    async def ask(ctx: Context) -> str:
        schema = {"type": "object", "properties": {"a": {"type": "string"}}}
        params = {"message": "hi", "requestedSchema": schema}
        answer = await server_sessions.send_raw_to_client(
            ctx.session, "elicitation/create", params, ctx.request_id
        )
        await server_sessions.notify_client(
            ctx.session, "notifications/x/custom", {"n": 1}, ctx.request_id
        )
        return str(answer)

    async def elicit(_ctx: Any, params: Any) -> Any:
        asked.append(params)
        return ElicitResult(action="decline")

    async def on_message(message: Any) -> None:
        noted.append(message)

    client = Client(server, mode="legacy", message_handler=on_message)
    client_sessions.answer_server_requests(client, sampling=None, elicitation=elicit, roots=None)
    async with client:
        result = await client.call_tool("ask", {})
    assert result.data == "{'action': 'decline'}"
    assert "mode" not in asked[0].model_fields_set


# --- session_reads: a url: server's messages seen before the SDK's client session ---------------


def _raw_mcp(request: httpx2.Request) -> httpx2.Response:
    """A streamable HTTP MCP server in one function: a call's stream carries a notification no
    MCP version defines before its reply."""
    if request.method != "POST":
        return httpx2.Response(405 if request.method == "GET" else 200)
    message = json.loads(request.content)
    if "id" not in message:
        return httpx2.Response(202)
    result: dict[str, Any] = {}
    first: list[dict[str, Any]] = []
    if message["method"] == "initialize":
        result = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
    elif message["method"] == "tools/list":
        result = {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}
    elif message["method"] == "tools/call":
        first = [{"jsonrpc": "2.0", "method": "notifications/vendor/x", "params": {"n": 1}}]
        result = {"content": [{"type": "text", "text": "done"}]}
    reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
    events = "".join(f"event: message\ndata: {json.dumps(m)}\n\n" for m in [*first, reply])
    headers = {"content-type": "text/event-stream", "mcp-session-id": "s1"}
    return httpx2.Response(200, headers=headers, content=events.encode())


async def test_taking_transport_offers_each_message_before_the_session_drops_it() -> None:
    """``TransportOptions.session_class`` builds fastmcp's session over our read stream: a
    notification the SDK's session would drop is taken first; the rest reach the session."""
    taken: list[str] = []

    async def take(message: Any) -> bool:
        method = getattr(getattr(message, "message", None), "method", None)
        if method == "notifications/vendor/x":
            taken.append(method)
            return True
        return False

    def http_client(**kwargs: Any) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            transport=httpx2.MockTransport(_raw_mcp), headers=kwargs.get("headers")
        )

    transport = session_reads.TakingStreamableHttp(
        "http://raw.example/mcp", httpx_client_factory=http_client
    )
    transport.take = take
    async with Client(transport, mode="legacy") as client:
        result = await client.call_tool("t", {})
    assert result.content[0].text == "done"  # type: ignore[union-attr]
    assert taken == ["notifications/vendor/x"]


async def test_taken_reads_end_with_their_stream() -> None:
    send, receive = anyio.create_memory_object_stream[Any](4)

    async def take(message: Any) -> bool:
        return bool(message == "taken")

    reads = session_reads.TakenReads(receive, take)
    async with send:
        await send.send("taken")
        await send.send("kept")
    async with reads:
        assert [message async for message in reads] == ["kept"]


async def test_a_held_stream_ends_in_its_turn_even_when_its_id_was_reused() -> None:
    """The fast path's cancelled calls count with the SDK path's; a stream held under an id
    that a later request reused is still the one that ends, the new one stays."""
    sessions = http_sessions.session_manager(app=fastmcp_server.low_level_server(FastMCP("x")))
    transport = sessions._admit_session(None)
    assert transport is not None
    first = anyio.create_memory_object_stream[Any](1)
    http_sessions.hold_unanswered(transport, "0", first)
    reused = transport._request_streams["0"] = anyio.create_memory_object_stream[Any](1)
    for request_id in range(1, http_sessions.HELD_STREAMS + 1):
        transport._request_streams[str(request_id)] = anyio.create_memory_object_stream(1)
        await transport._terminate_unanswered_request(request_id)
    with pytest.raises(anyio.ClosedResourceError):  # (ended: closed, out of the mapping)
        first[1].receive_nowait()
    assert transport._request_streams["0"] is reused
    for send, receive in transport._request_streams.values():
        send.close()
        receive.close()
