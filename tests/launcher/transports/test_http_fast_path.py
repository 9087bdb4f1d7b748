"""The HTTP fast path of relayed calls: a real ``dpt-launch`` over HTTP mounting a raw stdio
child, the official ``mcp`` client. The child tells which path a call took: the request id it
gets is the launcher's own ``dpt~N`` on the fast path, the SDK session's integer otherwise
(a call with a progress token keeps the SDK path)."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from doc_processing_std_tools.launcher.cli.main import main
from doc_processing_std_tools.seams.http_sessions import HELD_STREAMS
from helpers import launch
from helpers.launch import Launched, text_of
from helpers.paths import SERVERS
from helpers.rpc import (
    message,
    open_get,
    open_post,
    open_session,
    read_to_end,
    request,
    rpc,
    rpc_headers,
)
from helpers.waiting import until, wait_for

RAW_CHILD = SERVERS / "raw_child.py"


def raw_config(tmp_path: Path, transport: str = "") -> Path:
    """A config serving only the raw child (``transport`` lines: the ``transport:`` section's
    body, indented by two spaces)."""
    config = tmp_path / "tools.yaml"
    head = f"transport:\n{transport}" if transport else ""
    config.write_text(
        f"{head}servers:\n  raw:\n    command: {sys.executable}\n    args: [{RAW_CHILD}]\n",
        encoding="utf-8",
    )
    return config


SHIFTING = SERVERS / "shifting_server.py"
PROGRESS = {"progressToken": "p1"}  # (keeps a call on the SDK path)

CONFIG = """\
    log_level: INFO
    transport:
      log_format: json
    access:
      - tools: ["*"]
        exclude: ["*denied"]
    audit: {audit}
    profiles:
      small:
        exclude: ["*fine"]
    rate_limits:
      - tools: ["*limited"]
        rate: 1/h
        burst: 1
    servers:
      raw:
        command: {python}
        args: [{child}]
"""


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Launched, Path]]:
    folder = tmp_path_factory.mktemp("fast")
    audit = folder / "audit.jsonl"
    config = folder / "tools.yaml"
    text = CONFIG.format(audit=audit, python=sys.executable, child=RAW_CHILD)
    config.write_text(textwrap.dedent(text), encoding="utf-8")
    with launch.http_launcher(config) as running:
        yield running, audit


@asynccontextmanager
async def client(launched: Launched, path: str = "", **options: Any) -> AsyncIterator[Any]:
    async with (
        streamable_http_client(launched.url + path) as (read, write, *_),
        ClientSession(read, write, **options) as session,
    ):
        await session.initialize()
        listed = await session.list_tools()
        seen = next(t.name for t in listed.tools if t.name.endswith("id_seen"))
        NAMES["prefix"] = seen.removesuffix("id_seen")
        yield session


NAMES: dict[str, str] = {}


def name(_session: Any, tool: str) -> str:
    """The name clients call *tool* by (a denied tool is not listed, but called as any)."""
    return NAMES["prefix"] + tool


async def fast(session: Any) -> str:
    """Once this session's calls take the fast path (its own upstream session opens in the
    background after its handshake): the id the child saw."""

    async def seen() -> str:
        result = await session.call_tool(name(session, "id_seen"), {})
        return text_of(result) if text_of(result).startswith('"dpt~') else ""

    return await until(seen, "a call on the fast path")


async def test_a_relayed_call_takes_the_fast_path_with_the_sdk_paths_result(launched) -> None:
    running, _ = launched
    with anyio.fail_after(60):
        async with client(running) as session:
            assert (await fast(session)).startswith('"dpt~')
            slow = await session.call_tool(name(session, "id_seen"), {}, meta=PROGRESS)
            assert not text_of(slow).startswith('"dpt~')  # (an integer: the SDK session's id)
            quick = await session.call_tool(name(session, "fine"), {})
            sdk = await session.call_tool(name(session, "fine"), {}, meta=PROGRESS)
    assert quick.model_dump() == sdk.model_dump()
    assert text_of(quick) == "fine"

    def access_lines() -> list[dict[str, Any]]:
        lines = running.stderr().splitlines()
        entries = [json.loads(line) for line in lines if '"dpt-launch.access"' in line]
        return [e for e in entries if str(e.get("tool", "")).endswith("id_seen")]

    seen = wait_for(access_lines, "the access log's lines of the calls")
    assert all(e["mcp_method"] == "tools/call" and e["status"] == 200 for e in seen)


async def test_access_rate_limits_and_audit_decide_as_on_the_sdk_path(launched) -> None:
    running, audit = launched
    with anyio.fail_after(60):
        async with client(running) as session:
            await fast(session)
            denied = await session.call_tool(name(session, "denied"), {})
            denied_sdk = await session.call_tool(name(session, "denied"), {}, meta=PROGRESS)
            first = await session.call_tool(name(session, "limited"), {})
            limited = await session.call_tool(name(session, "limited"), {})
            limited_sdk = await session.call_tool(name(session, "limited"), {}, meta=PROGRESS)
    assert denied.is_error and denied.model_dump() == denied_sdk.model_dump()
    assert not first.is_error and text_of(first) == "fine"
    assert limited.is_error and limited.model_dump() == limited_sdk.model_dump()
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    denied_lines = [line for line in lines if line.get("tool", "").endswith("denied")]
    assert len(denied_lines) >= 2
    fast_line, sdk_line = denied_lines[-2:]
    for key in ("user", "session", "client", "outcome", "server", "tool"):
        assert fast_line.get(key) == sdk_line.get(key), key


async def test_a_log_message_during_the_call_reaches_the_client_before_the_reply(
    launched,
) -> None:
    running, _ = launched
    logs: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    with anyio.fail_after(60):
        async with client(running, logging_callback=on_log) as session:
            await fast(session)
            sdk = await session.call_tool(name(session, "logs_first"), {}, meta=PROGRESS)
            assert text_of(sdk) == "logged"
            assert logs == ["before the answer"]
            result = await session.call_tool(name(session, "logs_first"), {})
            assert text_of(result) == "logged"
            assert logs == ["before the answer"] * 2


class RawSession:
    """An MCP session over raw HTTP (to see each POST's answer as it is, or its absence)."""

    def __init__(self, running: Launched, token: str | None = None) -> None:
        self.port, self.path = running.port, urlsplit(running.url).path
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.id = open_session(self.port, self.auth, path=self.path)
        listed = self.rpc("tools/list", {}, 1).message()["result"]["tools"]
        seen = next(t["name"] for t in listed if t["name"].endswith("id_seen"))
        self.prefix = seen.removesuffix("id_seen")

    def rpc(self, method: str, params: dict[str, Any], request_id: int | None) -> Any:
        return rpc(
            self.port,
            method,
            params,
            session=self.id,
            headers=self.auth,
            request_id=request_id,
            path=self.path,
        )

    def call(self, tool: str, request_id: int = 1) -> str:
        """The text of *tool*'s answer."""
        params = {"name": self.prefix + tool, "arguments": {}}
        reply = self.rpc("tools/call", params, request_id).message()
        return str(reply["result"]["content"][0]["text"])

    def cancel(self, request_id: int, token: str | None = None) -> int:
        """Send ``notifications/cancelled`` for *request_id* (as the holder of *token*, else
        of the session's own): the HTTP status."""
        auth = {"Authorization": f"Bearer {token}"} if token else self.auth
        body = json.dumps(message("notifications/cancelled", {"requestId": request_id}))
        headers = {**rpc_headers(self.id), **auth}
        return request(self.port, "POST", self.path, headers=headers, body=body.encode()).status

    async def fast(self) -> None:
        """Once this session's calls take the fast path."""

        async def seen() -> bool:
            return (await anyio.to_thread.run_sync(self.call, "id_seen")).startswith('"dpt~')

        await until(seen, "a call on the fast path")

    def seen(self, tool: str) -> int:
        """How many of the fast path's calls the child lists in *tool*'s answer (``hangs_seen``:
        the ``hang`` calls it got, ``cancels_seen``: those it was told were cancelled)."""
        seen = json.loads(self.call(tool))
        return sum(isinstance(key, str) and key.startswith("dpt~") for key in seen)

    async def more(self, tool: str, than: int) -> bool:
        """Whether *tool*'s count (:meth:`seen`) went past *than*."""
        return await anyio.to_thread.run_sync(self.seen, tool) > than

    async def hang(self, request_id: int) -> Any:
        """A ``hang`` call on a connection of its own, once it is at the child: its answer left
        to read."""
        hangs = await anyio.to_thread.run_sync(self.seen, "hangs_seen")
        params = {"name": self.prefix + "hang", "arguments": {}}
        body = json.dumps(message("tools/call", params, id=request_id)).encode()
        headers = {**rpc_headers(self.id), **self.auth}
        call = await open_post(self.port, self.path, headers, body)
        await until(lambda: self.more("hangs_seen", hangs), f"call {request_id} at the child")
        return call

    async def hang_cancelled(self, request_id: int) -> Any:
        """A ``hang`` call (its id not 1, the id of the other calls here) on a connection of its
        own, cancelled once at the child (the cancel of a call not there yet ends it before it
        gets there): its answer left to read."""
        cancels = await anyio.to_thread.run_sync(self.seen, "cancels_seen")
        call = await self.hang(request_id)
        await anyio.to_thread.run_sync(self.cancel, request_id)
        await until(lambda: self.more("cancels_seen", cancels), f"the child told of {request_id}")
        return call


def replied_to(answer: bytes, request_id: int) -> bool:
    """Whether an HTTP answer carries a JSON-RPC reply for *request_id*."""
    text = answer.decode(errors="replace")
    return any(
        json.loads(line[5:]).get("id") == request_id
        for line in text.splitlines()
        if line.startswith("data:")
    ) or f'"id":{request_id},' in text.replace(" ", "")


async def test_a_cancelled_call_is_cancelled_at_the_child_and_gets_no_reply(launched) -> None:
    running, _ = launched
    with anyio.fail_after(60):
        session = await anyio.to_thread.run_sync(RawSession, running)
        await session.fast()
        call = await session.hang_cancelled(7)
        headers = {**rpc_headers(session.id), "Content-Length": "0"}
        ended = await anyio.to_thread.run_sync(
            lambda: request(session.port, "DELETE", session.path, headers=headers)
        )
        assert ended.status == 200
        answer = await read_to_end(call)  # (the session's end ends the held stream)
    assert not replied_to(answer, 7), answer


async def test_a_client_that_leaves_mid_call_cancels_it_at_the_child(launched) -> None:
    """(The connection's protocol tells the call its client left: no task waits on it.)"""
    running, _ = launched
    with anyio.fail_after(60):
        session = await anyio.to_thread.run_sync(RawSession, running)
        await session.fast()
        cancels = await anyio.to_thread.run_sync(session.seen, "cancels_seen")
        call = await session.hang(21)
        await call.aclose()
        await until(lambda: session.more("cancels_seen", cancels), "the child told of the cancel")


async def test_a_client_that_leaves_after_cancelling_ends_its_request(launched) -> None:
    """(A held stream's request waited until the cap or the session's end, counted by
    uvicorn's limit_concurrency meanwhile: the access log's line says it ended.)"""
    running, _ = launched
    with anyio.fail_after(60):
        session = await anyio.to_thread.run_sync(RawSession, running)
        await session.fast()
        call = await session.hang_cancelled(27)

        def ended() -> list[dict[str, Any]]:
            lines = running.stderr().splitlines()
            entries = [json.loads(line) for line in lines if '"dpt-launch.access"' in line]
            return [
                e
                for e in entries
                if e.get("session") == session.id and e.get("tool") == session.prefix + "hang"
            ]

        assert not ended()
        await call.aclose()
        await until(ended, "the end of the cancelled call's request")


async def test_a_session_ended_mid_call_ends_the_calls_answer_without_a_reply(launched) -> None:
    """(As on the SDK path: the request's stream ends, and the call with it.)"""
    running, _ = launched
    with anyio.fail_after(60):
        session = await anyio.to_thread.run_sync(RawSession, running)
        await session.fast()
        call = await session.hang(23)
        headers = {**rpc_headers(session.id), "Content-Length": "0"}
        ended = await anyio.to_thread.run_sync(
            lambda: request(session.port, "DELETE", session.path, headers=headers)
        )
        assert ended.status == 200
        answer = await read_to_end(call)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert not replied_to(answer, 23), answer


GUARD_CASES = [  # (Host, Origin, status): a request after the same one's vetted Host
    ("evil.example", None, 421),
    ("127.0.0.1:{port}", "http://evil.example", 403),
    (None, None, 400),
]


@pytest.mark.parametrize(("host", "origin", "status"), GUARD_CASES)
async def test_host_and_origin_are_checked_on_the_fast_path_too(
    launched, host: str | None, origin: str | None, status: int
) -> None:
    running, _ = launched
    with anyio.fail_after(60):
        session = await anyio.to_thread.run_sync(RawSession, running)
        await session.fast()  # (calls with the good Host: its verdict is remembered)
        hangs = await anyio.to_thread.run_sync(session.seen, "hangs_seen")
        params = {"name": session.prefix + "hang", "arguments": {}}
        port = session.port
        reply = await anyio.to_thread.run_sync(
            lambda: rpc(
                port,
                "tools/call",
                params,
                session=session.id,
                host=host.format(port=port) if host is not None else None,
                headers={"Origin": origin} if origin else {},
                path=session.path,
            )
        )
        assert reply.status == status, reply
        assert await anyio.to_thread.run_sync(session.seen, "hangs_seen") == hangs


async def test_the_streams_of_cancelled_calls_are_held_as_on_the_sdk_path(launched) -> None:
    """A cancelled call gets no reply, its stream held open; past the SDK path's cap per
    session the oldest ends, still unanswered."""
    running, _ = launched
    with anyio.fail_after(120):
        session = await anyio.to_thread.run_sync(RawSession, running)
        await session.fast()
        calls = [await session.hang_cancelled(100 + n) for n in range(HELD_STREAMS + 1)]
        answer = await read_to_end(calls[0])
        for call in calls[1:]:
            await call.aclose()
    assert not replied_to(answer, 100), answer


async def test_a_tool_the_profile_leaves_out_is_unknown_on_both_paths(launched) -> None:
    running, _ = launched
    with anyio.fail_after(60):
        async with client(running, "/small") as session:
            await fast(session)
            hidden = await session.call_tool(name(session, "fine"), {})
            hidden_sdk = await session.call_tool(name(session, "fine"), {}, meta=PROGRESS)
            listed = {tool.name for tool in (await session.list_tools()).tools}
    assert name(session, "fine") not in listed
    assert hidden.is_error and "fine" in text_of(hidden)
    assert hidden.model_dump() == hidden_sdk.model_dump()


@pytest.mark.slow  # (a launcher of its own, stopped by the test)
async def test_the_drain_on_sigterm_waits_for_a_call_on_the_fast_path(tmp_path: Path) -> None:
    mark = tmp_path / "slow-started"
    config = raw_config(tmp_path)
    with launch.http_launcher(config, env={"RAW_CHILD_MARK": str(mark)}) as running:
        with anyio.fail_after(60):
            async with client(running) as session:
                await fast(session)
                async with anyio.create_task_group() as group:
                    replies: list[Any] = []

                    async def slow() -> None:
                        replies.append(await session.call_tool(name(session, "slow"), {}))

                    group.start_soon(slow)
                    await until(mark.exists, "the slow call at the child")
                    running.proc.send_signal(signal.SIGTERM)
        assert text_of(replies[0]) == "slow done"
        assert await anyio.to_thread.run_sync(running.proc.wait, 60) == 0
    assert "Traceback" not in running.stderr()


@pytest.mark.slow  # (a launcher of its own)
async def test_a_withheld_pin_refuses_alike_on_both_paths(write_config, tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = write_config(
        f"servers:\n  shifty:\n    command: {sys.executable}\n    args: [{SHIFTING}, {state}]\n"
    )
    assert await anyio.to_thread.run_sync(main, ["pin", "--config", str(config)]) == 0
    with launch.http_launcher(config) as running, anyio.fail_after(60):
        async with (
            streamable_http_client(running.url) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.list_tools()

            async def fast_path() -> bool:  # (the child's id: the launcher's own dpt~N)
                seen = await session.call_tool("id_seen", {})
                return text_of(seen).startswith("dpt~")

            await until(fast_path, "a call on the fast path")
            withheld = await session.call_tool("sneaky", {})
            withheld_sdk = await session.call_tool("sneaky", {}, meta=PROGRESS)
            on_sdk_path = await session.call_tool("id_seen", {}, meta=PROGRESS)
    assert not text_of(on_sdk_path).startswith("dpt~")
    assert withheld.is_error and "hidden characters (U+200B)" in text_of(withheld)
    assert withheld.model_dump() == withheld_sdk.model_dump()


@pytest.mark.slow  # (a launcher of its own)
async def test_only_the_sessions_owner_cancels_its_call(tmp_path: Path) -> None:
    mark = tmp_path / "slow-started"
    config = raw_config(tmp_path, "  auth:\n    token: [token-one, token-two]\n")
    with launch.http_launcher(config, env={"RAW_CHILD_MARK": str(mark)}) as running:
        with anyio.fail_after(60):
            session = await anyio.to_thread.run_sync(RawSession, running, "token-one")
            await session.fast()
            async with anyio.create_task_group() as group:
                replies: list[str] = []

                async def slow() -> None:
                    replies.append(await anyio.to_thread.run_sync(session.call, "slow", 9))

                group.start_soon(slow)
                await until(mark.exists, "the slow call at the child")
                await anyio.to_thread.run_sync(session.cancel, 9, "token-two")
    assert replies == ["slow done"]


@pytest.mark.slow  # (a launcher of its own, stopped by the test)
async def test_a_session_with_only_a_cancelled_call_idles_out_and_drains(tmp_path: Path) -> None:
    config = raw_config(tmp_path, "  session_idle_timeout: 2\n  shutdown_grace: 60\n")
    with launch.http_launcher(config) as running:
        with anyio.fail_after(40):
            idle = await anyio.to_thread.run_sync(RawSession, running)
            await idle.fast()
            held = await idle.hang_cancelled(11)
            assert not replied_to(await read_to_end(held), 11)  # (ended by the idle-out)
            busy = await anyio.to_thread.run_sync(RawSession, running)
            await busy.fast()
            headers = {"Accept": "text/event-stream", "Mcp-Session-Id": busy.id}
            stream = await open_get(busy.port, busy.path, headers)  # (the session stays)
            held = await busy.hang_cancelled(12)
            running.proc.send_signal(signal.SIGTERM)  # (no wait for the held stream's POST)
            assert await anyio.to_thread.run_sync(running.proc.wait, 30) == 0
            await held.aclose()
            await stream.aclose()
    assert "Traceback" not in running.stderr()


@pytest.mark.slow  # (a launcher of its own)
async def test_calls_cancelled_then_left_by_their_clients_free_their_slots(tmp_path: Path) -> None:
    """With ``max_connections: 4`` (uvicorn's limit_concurrency: 5, requests counted among
    them), six calls cancelled and then left by their clients: calls are still served, not
    refused with uvicorn's 503 (each left request ended, not held until the cap or the
    session's end)."""
    config = raw_config(tmp_path, "  max_connections: 4\n")
    with launch.http_launcher(config) as running:
        with anyio.fail_after(90):
            session = await anyio.to_thread.run_sync(RawSession, running)
            await session.fast()
            params = {"name": session.prefix + "id_seen", "arguments": {}}

            def served() -> bool:
                return bool(session.rpc("tools/call", params, 1).status == 200)

            for n in range(6):
                call = await session.hang_cancelled(40 + n)
                await call.aclose()
                await until(lambda: anyio.to_thread.run_sync(served), "a call served")
