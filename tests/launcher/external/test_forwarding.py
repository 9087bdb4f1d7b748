"""What a mounted server asks of the client reaches the client (issue 26, section 1), over stdio.

A real FastMCP child (``tests/helpers/servers/asking_server.py``) is mounted with ``command:``; the
official mcp client talks to ``dpt-launch`` and answers sampling, elicitation and
roots itself. Where a case has an answer of its own (a client without a capability),
the same child run alone is the reference.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from doc_processing_std_tools.launcher.external.client_requests import MAX_TASKS, FrontLink, Fronts
from helpers.launch import launched, text_of
from helpers.paths import SERVERS

ASKER = SERVERS / "asking_server.py"
NOTES = SERVERS / "subscribing_child.py"
WAIT = 30  # seconds before a test that waits for a message gives up (never expected)


def asker_config(write_config: Any, extra: str = "") -> Path:
    return write_config(
        f"servers:\n  ask:\n    command: {sys.executable}\n    args: [{ASKER}]\n"
        f"    namespace: ask\n{extra}"
    )


async def sampled(context: Any, params: mcp_types.CreateMessageRequestParams) -> Any:
    """The client's model: echoes the prompt; offered tools, it uses the first one, with an input
    that shows what it was offered (the tool's description and schema, the tool choice)."""
    prompt = params.messages[0].content.text  # type: ignore[union-attr]
    if params.tools:
        tool = params.tools[0]
        offered = {
            "word": prompt,
            "about": tool.description,
            "schema": sorted(tool.input_schema["properties"]),
            "choice": params.tool_choice.mode if params.tool_choice else None,
        }
        return mcp_types.CreateMessageResultWithTools(
            role="assistant",
            model="client-model",
            content=[mcp_types.ToolUseContent(id="use-1", name=tool.name, input=offered)],
            stop_reason="toolUse",
        )
    return mcp_types.CreateMessageResult(
        role="assistant",
        model="client-model",
        content=mcp_types.TextContent(type="text", text=f"echo {prompt}"),
    )


SAMPLING_WITH_TOOLS = mcp_types.SamplingCapability(tools=mcp_types.SamplingToolsCapability())
SAMPLED_WITH_TOOLS = (
    "toolUse: lookup({'word': 'hi', 'about': 'Look a word up', 'schema': ['word'], "
    "'choice': 'required'})"
)


async def elicited(context: Any, params: mcp_types.ElicitRequestParams) -> Any:
    return mcp_types.ElicitResult(action="accept", content={"value": "Ada"})


async def listed_roots(context: Any) -> Any:
    return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri="file:///work/project")])


@asynccontextmanager
async def alone(**callbacks: Any) -> AsyncIterator[Any]:
    """The asking server on its own, with the official client."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(ASKER)], env=dict(os.environ))
    with open(os.devnull, "w") as errlog, anyio.fail_after(WAIT):
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, **callbacks) as session,
        ):
            await session.initialize()
            yield session


async def test_sampling_elicitation_and_roots_reach_the_client_and_its_answers_come_back(
    write_config: Any,
) -> None:
    async with launched(
        asker_config(write_config),
        sampling_callback=sampled,
        sampling_capabilities=SAMPLING_WITH_TOOLS,
        elicitation_callback=elicited,
        list_roots_callback=listed_roots,
    ) as session:
        sample = await session.call_tool("ask_sample", {"prompt": "hi"})
        assert text_of(sample) == "client-model: echo hi"
        with_tools = await session.call_tool("ask_sample_with_tools", {"prompt": "hi"})
        assert text_of(with_tools) == SAMPLED_WITH_TOOLS
        name = await session.call_tool("ask_ask_name", {})
        assert text_of(name) == "accept: Ada"
        roots = await session.call_tool("ask_roots", {})
        assert text_of(roots) == "file:///work/project"


@pytest.mark.slow
async def test_children_are_initialized_declaring_what_the_stdio_client_declared(
    write_config: Any,
) -> None:
    """Over stdio the one client's session is the child's: the child is told exactly the
    capabilities that client declared (issue #34), not everything the launcher could forward."""
    async with launched(asker_config(write_config)) as session:
        bare = json.loads(text_of(await session.call_tool("ask_client_capabilities", {})))
    assert not {"sampling", "elicitation", "roots"} & set(bare), bare
    async with launched(
        asker_config(write_config),
        sampling_callback=sampled,
        elicitation_callback=elicited,
        list_roots_callback=listed_roots,
    ) as session:
        full = json.loads(text_of(await session.call_tool("ask_client_capabilities", {})))
    assert "sampling" in full and "elicitation" in full
    assert full["roots"] == {"listChanged": True}


@pytest.mark.slow
async def test_a_client_without_a_capability_gives_the_child_the_error_it_gives_alone(
    write_config: Any,
) -> None:
    """The client declares roots only: sampling and elicitation fail as they do without the
    launcher, and roots (asked in the same session) still reach it."""
    calls = (("sample", {"prompt": "hi"}), ("ask_name", {}), ("sample_with_tools", {"prompt": "x"}))
    async with alone(list_roots_callback=listed_roots) as session:
        expected = [text_of(await session.call_tool(name, arguments)) for name, arguments in calls]
    assert expected[0] == "error -32600: Sampling not supported"
    assert expected[2] == "error -32602: Client does not support sampling tools capability"
    async with launched(asker_config(write_config), list_roots_callback=listed_roots) as session:
        got = [
            text_of(await session.call_tool(f"ask_{name}", arguments)) for name, arguments in calls
        ]
        roots = text_of(await session.call_tool("ask_roots", {}))
    assert got == expected
    assert roots == "file:///work/project"


@pytest.mark.slow
async def test_a_client_without_roots_shares_no_folder_with_the_child(write_config: Any) -> None:
    """A client that declared no roots: the child is told none were declared and answers as it
    does alone (no folder of anyone's reaches it)."""
    async with alone() as session:
        expected = text_of(await session.call_tool("roots", {}))
    async with launched(asker_config(write_config)) as session:
        assert text_of(await session.call_tool("ask_roots", {})) == expected


@pytest.mark.slow
async def test_a_childs_log_messages_reach_the_client_at_its_level_named_by_the_server(
    write_config: Any,
) -> None:
    received: list[mcp_types.LoggingMessageNotificationParams] = []
    arrived = anyio.Event()

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        received.append(params)
        arrived.set()

    async with launched(asker_config(write_config), logging_callback=on_log) as session:
        await session.set_logging_level("info")
        assert text_of(await session.call_tool("ask_chatter", {"text": "hello"})) == "said"
        with anyio.fail_after(WAIT):
            await arrived.wait()
    assert [(m.level, m.logger) for m in received] == [("info", "ask/chat")]
    data = received[0].data
    assert (data.get("msg") if isinstance(data, dict) else data) == "info hello"


def roots_seen(result: Any) -> list[str]:
    """The asking server's ``roots_seen`` list (an empty list comes back as no text)."""
    text = text_of(result)
    return json.loads(text) if text else []


@pytest.mark.slow
async def test_a_child_that_asks_for_roots_before_the_client_connects_gets_its_roots(
    write_config: Any,
) -> None:
    async with launched(asker_config(write_config), list_roots_callback=listed_roots) as session:
        with anyio.fail_after(WAIT):
            while True:
                seen = roots_seen(await session.call_tool("ask_roots_seen", {}))
                if "file:///work/project" in seen:
                    break
                await anyio.sleep(0.05)
    # asked at the launcher's start, before the client connected: held until it had, then
    # answered with its roots (not -32600, which the reference filesystem server logs)
    assert seen[0] == "file:///work/project", seen


@pytest.mark.slow
async def test_the_clients_roots_list_changed_reaches_the_child(write_config: Any) -> None:
    current = ["file:///work/one"]

    async def changing_roots(context: Any) -> Any:
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=uri) for uri in current])

    async with launched(asker_config(write_config), list_roots_callback=changing_roots) as session:
        current[:] = ["file:///work/two"]
        await session.send_roots_list_changed()
        with anyio.fail_after(WAIT):
            while True:
                seen = roots_seen(await session.call_tool("ask_roots_seen", {}))
                if "file:///work/two" in seen:
                    break
                await anyio.sleep(0.05)


@pytest.mark.slow
async def test_over_http_each_sessions_call_reaches_that_session(write_config: Any) -> None:
    """Two clients over streamable HTTP sharing one session (``sessions: shared``), one after the
    other on the same child: each one's
    sampling (with tools too), elicitation, roots, log messages and resource updates come from
    or go to that client; calls from both at once take turns; outside a call nothing is
    guessed."""
    from contextlib import AsyncExitStack

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from helpers.launch import http_launcher

    logs: dict[str, list[Any]] = {"first": [], "second": []}
    held: dict[str, anyio.Event] = {}  # the client's answer to an elicitation waits for it
    updated: dict[str, list[str]] = {"first": [], "second": []}  # resources/updated received
    asked: set[str] = set()

    def answers(tag: str) -> dict[str, Any]:
        async def sample(context: Any, params: Any) -> Any:
            if params.tools:
                return await sampled(context, params)
            return mcp_types.CreateMessageResult(
                role="assistant",
                model=tag,
                content=mcp_types.TextContent(type="text", text="x"),
            )

        async def elicit(context: Any, params: Any) -> Any:
            asked.add(tag)
            if tag in held:
                await held[tag].wait()
            return mcp_types.ElicitResult(action="accept", content={"value": tag})

        async def roots(context: Any) -> Any:
            return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=f"file:///{tag}")])

        async def log(params: Any) -> None:
            logs[tag].append((params.level, params.logger))

        async def on_message(message: Any) -> None:
            note = getattr(message, "root", message)
            if getattr(note, "method", None) == "notifications/resources/updated":
                updated[tag].append(str(note.params.uri))

        return {
            "sampling_callback": sample,
            "sampling_capabilities": SAMPLING_WITH_TOOLS,
            "elicitation_callback": elicit,
            "list_roots_callback": roots,
            "logging_callback": log,
            "message_handler": on_message,
        }

    # (lock: never: its tools change no state; the process lock would make calls one at a time;
    # sessions: shared: this is the shared session's routing, each client's own is elsewhere)
    config = asker_config(
        write_config,
        f"    lock: never\n    sessions: shared\n  notes:\n    command: {sys.executable}\n"
        f"    args: [{NOTES}]\n    namespace: notes\n    sessions: shared\n",
    )
    with http_launcher(config) as launched, anyio.fail_after(60):
        async with AsyncExitStack() as stack:
            sessions = []
            for tag in ("first", "second"):
                read, write, *_ = await stack.enter_async_context(
                    streamable_http_client(launched.url)
                )
                session = await stack.enter_async_context(
                    ClientSession(read, write, **answers(tag))
                )
                await session.initialize()
                sessions.append(session)
            for tag, session in zip(("second", "first"), reversed(sessions), strict=True):
                assert text_of(await session.call_tool("ask_sample", {"prompt": "p"})) == (
                    f"{tag}: x"
                )
                assert text_of(await session.call_tool("ask_roots", {})) == f"file:///{tag}"
                assert text_of(await session.call_tool("ask_ask_name", {})) == f"accept: {tag}"
                with_tools = await session.call_tool("ask_sample_with_tools", {"prompt": "hi"})
                assert text_of(with_tools) == SAMPLED_WITH_TOOLS
            await sessions[1].set_logging_level("info")
            assert text_of(await sessions[1].call_tool("ask_chatter", {"text": "t"})) == "said"
            with anyio.fail_after(WAIT):
                while not logs["second"]:
                    await anyio.sleep(0.05)
            assert logs == {"first": [], "second": [("info", "ask/chat")]}

            # Calls from both sessions at once: the second session's waits for the first's turn
            # on this child, so what the child asks during each reaches that call's client.
            held["first"], asked = anyio.Event(), set()
            results: dict[str, str] = {}

            async def call(tag: str, session: Any, name: str, arguments: dict[str, Any]) -> None:
                results[tag] = text_of(await session.call_tool(name, arguments))

            async with anyio.create_task_group() as group:
                group.start_soon(call, "first", sessions[0], "ask_ask_name", {})
                while "first" not in asked:
                    await anyio.sleep(0.02)
                group.start_soon(call, "second", sessions[1], "ask_sample", {"prompt": "p"})
                await anyio.sleep(0.3)  # (its call reaches the launcher meanwhile)
                assert not results  # the first's call holds the child: the second waits its turn
                held["first"].set()
            assert results == {"first": "accept: first", "second": "second: x"}

            # A subscription over HTTP: the update reaches the session that subscribed, only.
            await sessions[1].subscribe_resource("note://notes/a")
            touched = await sessions[0].call_tool("notes_touch", {})
            assert text_of(touched) == "subscribed: note://a"
            with anyio.fail_after(WAIT):
                while not updated["second"]:
                    await anyio.sleep(0.02)
            assert updated == {"first": [], "second": ["note://notes/a"]}
            await sessions[1].unsubscribe_resource("note://notes/a")
            touched = await sessions[0].call_tool("notes_touch", {})
            assert text_of(touched) == "subscribed: "
            await sessions[0].send_roots_list_changed()
            with anyio.fail_after(WAIT):
                while True:
                    seen = roots_seen(await sessions[0].call_tool("ask_roots_seen", {}))
                    if len(seen) >= 2:
                        break
                    await anyio.sleep(0.05)
    # Asked after list_changed: outside any call it is refused, not guessed; or, when the ask
    # lands while one of the polling calls above is in flight, it goes to that call's session
    # (the first). Never to the other client.
    assert "outside any call" in seen[-1] or seen[-1] == "file:///first", seen


def test_a_servers_task_ids_are_remembered_up_to_a_bound_oldest_forgotten_first() -> None:
    link = FrontLink("everything", Fronts())
    session = object()
    for number in range(MAX_TASKS + 2):
        link.made_task(f"t{number}", session)
    assert len(link.tasks) == MAX_TASKS
    assert "t0" not in link.tasks and "t1" not in link.tasks and f"t{MAX_TASKS + 1}" in link.tasks


def test_a_task_belongs_to_the_client_it_was_made_for() -> None:
    link = FrontLink("everything", Fronts())
    mine, other = object(), object()
    link.made_task("t1", mine)
    assert link.owns("t1", mine) and not link.owns("t1", other)
    assert not link.owns(["t1"], mine) and not link.owns("t2", mine)  # (a client's odd id)


class _Connection:
    """An HTTP client connection as the launcher sees one: its session id and teardown stack."""

    def __init__(self) -> None:
        self.session_id = uuid.uuid4().hex
        self.exit_stack = contextlib.ExitStack()


async def test_a_notification_outside_any_call_goes_to_the_one_http_client_only() -> None:
    """A notification of a session clients share, sent outside any call, goes to the one HTTP
    client connected; never one of the launcher's own session (with sessions per client)."""
    fronts = Fronts()
    link = FrontLink("everything", fronts)
    first, second = (
        SimpleNamespace(_connection=_Connection()),
        SimpleNamespace(_connection=_Connection()),
    )
    with pytest.raises(MCPError):
        link._told("notifications/message")  # (no client connected)
    await fronts.client_ready(first, stdio=False)
    assert link._told("notifications/message") == (first, None)
    await fronts.client_ready(second, stdio=False)
    with pytest.raises(MCPError, match="outside any call"):
        link._told("notifications/message")  # (two: whose is it?)
    with pytest.raises(MCPError):
        link._front("roots/list")  # (a request outside a call is still refused)
    first._connection.exit_stack.close()  # (the first one leaves)
    assert link._told("notifications/message") == (second, None)
    with link.calling(first, 7):
        assert link._told("notifications/message") == (first, 7)  # (a call's: its own)
    link.serves_clients = False  # (sessions per client: this one is the launcher's own)
    with pytest.raises(MCPError):
        link._told("notifications/message")


async def test_a_notification_outside_any_call_skips_a_client_that_may_not_see_the_server() -> None:
    """The one HTTP client is told of a server only when the composition judged, at its
    handshake, that it may see it (``access:``, its profile): a denied server is absent whole."""
    fronts = Fronts()
    hidden, shown = FrontLink("secret", fronts), FrontLink("everything", fronts)
    client = SimpleNamespace(_connection=_Connection())
    await fronts.client_ready(client, stdio=False, told=lambda server: server != "secret")
    assert shown._told("notifications/message") == (client, None)
    with pytest.raises(MCPError, match="may not see this server"):
        hidden._told("notifications/message")
    with hidden.calling(client, 3):
        assert hidden._told("notifications/message") == (client, 3)  # (its own call's: allowed)
    client._connection.exit_stack.close()
    assert fronts.http == {}
