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

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from doc_processing_std_tools.launcher.cli.main import main
from helpers import launch
from helpers.launch import Launched, text_of
from helpers.paths import SERVERS
from helpers.waiting import until, wait_for

RAW_CHILD = SERVERS / "raw_child.py"
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


async def test_a_cancelled_call_is_cancelled_at_the_child(launched) -> None:
    running, _ = launched
    with anyio.fail_after(60):
        async with client(running) as session:
            await fast(session)
            with anyio.move_on_after(0.5):  # (the SDK client sends notifications/cancelled)
                await session.call_tool(name(session, "hang"), {})

            async def told() -> list[Any]:
                seen = json.loads(text_of(await session.call_tool(name(session, "cancels_seen"))))
                return [key for key in seen if isinstance(key, str) and key.startswith("dpt~")]

            assert await until(told, "the child told of the cancelled call")


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
    config = tmp_path / "tools.yaml"
    text = f"servers:\n  raw:\n    command: {sys.executable}\n    args: [{RAW_CHILD}]\n"
    config.write_text(text, encoding="utf-8")
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
            greet = await until(
                lambda: session.call_tool("greet", {"name": "ada"}), "greet answered"
            )
            withheld = await session.call_tool("sneaky", {})
            withheld_sdk = await session.call_tool("sneaky", {}, meta=PROGRESS)
    assert text_of(greet) == "hello ada"
    assert withheld.is_error and "hidden characters (U+200B)" in text_of(withheld)
    assert withheld.model_dump() == withheld_sdk.model_dump()
