"""server-everything (npm, pinned in tests/helpers/reference_servers) connected directly and mounted in
``dpt-launch``, over stdio and streamable HTTP, with the same client script on both sides.

The baselines hold today; each case marked ``xfail(strict=True)`` is a row of issue #34 that
fails today for the reason it names, and turns into an XPASS failure (remove the mark) once
the launcher is fixed. The stdio variants of the xfail rows, and the rows that need a launcher
of their own, start a launcher and a node child each (seconds) and run in the slow lane.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from helpers.differential import (
    FULL,
    WAIT_TIMEOUT,
    Client,
    ClientSpec,
    Endpoint,
    Run,
    View,
    assert_same,
    everything_argv,
    everything_over_http,
    is_notification,
    launcher_argv,
    mount_config,
    needs_reference_servers,
    run_scenario,
    stdio_endpoint,
)
from helpers.launch import Launched, http_launcher
from helpers.stdio_wire import INITIALIZE, INITIALIZED, RawStdio

pytestmark = needs_reference_servers

NS, MOUNT = "ev", "everything"
SETTLED = "notifications/tools/list_changed"
ROOTS_SYNCED = is_notification("notifications/message", data="Roots updated")
NO_ROOTS = ClientSpec(sampling=True, elicitation=True)  # (the roots case is issue 34's first row)
TEMPLATE = "demo://resource/dynamic/text/{resourceId}"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("everything")


@pytest.fixture(scope="module")
def config(folder: Path) -> Path:
    return mount_config(folder / "tools.yaml", everything_argv(), mount=MOUNT, namespace=NS)


@pytest.fixture(scope="module")
def direct_http(folder: Path) -> Iterator[Endpoint]:
    with everything_over_http(folder / "everything-http.log") as url:
        yield Endpoint("direct http", url=url)


def mounted_over_http(launched: Launched) -> Endpoint:
    return Endpoint(
        "mounted http", url=launched.url, namespace=NS, mount=MOUNT, errlog=launched.errlog
    )


@pytest.fixture(scope="module")
def mounted_http(config: Path) -> Iterator[Endpoint]:
    """One launcher for the module's cases that leave no state behind in its shared session."""
    with http_launcher(config, errlog=config.parent / "launcher-http.log") as launched:
        yield mounted_over_http(launched)


def direct_stdio() -> Endpoint:
    return stdio_endpoint("direct stdio", everything_argv(), settle=SETTLED)


def mounted_stdio(config: Path) -> Endpoint:
    return stdio_endpoint(
        "mounted stdio",
        launcher_argv(config),
        namespace=NS,
        mount=MOUNT,
        cwd=config.parent,
        errlog=config.parent / "launcher-stdio.log",
    )


def endpoints(request: pytest.FixtureRequest, config: Path) -> tuple[Endpoint, Endpoint]:
    if request.param == "stdio":
        return direct_stdio(), mounted_stdio(config)
    return request.getfixturevalue("direct_http"), request.getfixturevalue("mounted_http")


@pytest.fixture(params=["stdio", "http"])
def pair(request: pytest.FixtureRequest, config: Path) -> tuple[Endpoint, Endpoint]:
    """(direct, mounted) over each transport."""
    return endpoints(request, config)


@pytest.fixture(params=[pytest.param("stdio", marks=pytest.mark.slow), "http"])
def pair_http_fast(request: pytest.FixtureRequest, config: Path) -> tuple[Endpoint, Endpoint]:
    """(direct, mounted) over each transport; the stdio one in the slow lane."""
    return endpoints(request, config)


def full_client(run: Run, label: str = "client") -> AbstractAsyncContextManager[Client]:
    """A client with every capability; over stdio it also offers a root and waits for
    server-everything's roots sync (a direct server asks 350 ms after initialize, on its own
    time), so both sides file it in the same step. Over HTTP no roots: that is row 1."""
    stdio = run.endpoint.transport == "stdio"
    spec = (
        ClientSpec(sampling=True, elicitation=True, roots=("file:///tmp",)) if stdio else NO_ROOTS
    )
    return run.client(label, spec)


# --- baselines: the same today ---------------------------------------------------------------


@pytest.mark.slow
async def test_calls_progress_sampling_elicitation_resources_are_the_same(
    pair: tuple[Endpoint, Endpoint],
) -> None:
    async def scenario(run: Run) -> None:
        async with full_client(run) as client:
            if run.endpoint.transport == "stdio":
                await client.wait_for("the roots sync", ROOTS_SYNCED)
            await client.call("echo", {"message": "hello"})
            await client.call("get-sum", {"a": 2, "b": 3})
            await client.call("get-structured-content", {"location": "Chicago"})
            await client.call("get-tiny-image")
            await client.call(
                "trigger-long-running-operation", {"duration": 0.6, "steps": 3}, progress=True
            )
            await client.call("trigger-sampling-request", {"prompt": "say hi", "maxTokens": 20})
            await client.read("demo://resource/static/document/features.md")
            await client.read("demo://resource/dynamic/text/2")
            await client.get_prompt("args-prompt", {"city": "Paris"})

    await assert_same(scenario, *pair)


async def test_two_http_clients_get_their_own_progress_and_sampling(
    direct_http: Endpoint, mounted_http: Endpoint
) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("A", NO_ROOTS) as a, run.client("B", NO_ROOTS) as b:
            await a.call(
                "trigger-long-running-operation", {"duration": 0.4, "steps": 2}, progress=True
            )
            await b.call(
                "trigger-long-running-operation", {"duration": 0.4, "steps": 4}, progress=True
            )
            await b.call("trigger-sampling-request", {"prompt": "from B"})
            await a.call("trigger-sampling-request", {"prompt": "from A"})

    await assert_same(scenario, direct_http, mounted_http)


async def test_elicitation_request_reaches_the_client_unchanged(
    pair_http_fast: tuple[Endpoint, Endpoint],
) -> None:
    async def scenario(run: Run) -> None:
        async with full_client(run) as client:
            if run.endpoint.transport == "stdio":
                await client.wait_for("the roots sync", ROOTS_SYNCED)
            await client.call("trigger-elicitation-request")

    await assert_same(scenario, *pair_http_fast, View(parts=("exchanges", "server requests")))


# --- issue 34, row 1: one upstream session shared by every HTTP client ----------------------


@pytest.mark.slow
async def test_two_http_clients_see_their_own_roots(
    direct_http: Endpoint, config: Path, tmp_path: Path
) -> None:
    def roots(name: str) -> tuple[str, ...]:
        return ((tmp_path / name).as_uri(),)

    async def scenario(run: Run) -> None:
        async with run.client("A", ClientSpec(roots=roots("a"))) as a:
            await a.wait_for("the roots sync", ROOTS_SYNCED, timeout=3)
            await a.call("get-roots-list")
            async with run.client("B", ClientSpec(roots=roots("b"))) as b:
                await b.wait_for("the roots sync", ROOTS_SYNCED, timeout=3)
                await b.call("get-roots-list")
                await a.call("get-roots-list")

    # (a launcher of its own: the shared session it starts with must be fresh)
    with http_launcher(config, errlog=tmp_path / "launcher.log") as launched:
        await assert_same(scenario, direct_http, mounted_over_http(launched))


# --- row 2: completion/complete ----------------------------------------------------------------


async def test_completion_of_prompt_and_template_arguments(
    pair_http_fast: tuple[Endpoint, Endpoint],
) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", NO_ROOTS) as client:
            await client.complete_prompt("completable-prompt", "department", "E")
            await client.complete_prompt(
                "completable-prompt", "name", "A", {"department": "Engineering"}
            )
            await client.complete_template(TEMPLATE, "resourceId", "7")

    await assert_same(scenario, *pair_http_fast, View(capabilities=("completions",)))


# --- row 3: resource links under a namespace ---------------------------------------------------


async def test_resource_links_and_references_read_back(
    pair_http_fast: tuple[Endpoint, Endpoint],
) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", NO_ROOTS) as client:
            reply = await client.call("get-resource-links", {"count": 3})
            for block in reply["result"]["content"]:
                if block["type"] == "resource_link":
                    await client.read(block["uri"], as_given=True)
            reply = await client.call(
                "get-resource-reference", {"resourceType": "Text", "resourceId": 4}
            )
            for block in reply["result"]["content"]:
                if block["type"] == "resource":
                    await client.read(block["resource"]["uri"], as_given=True)

    await assert_same(scenario, *pair_http_fast)


async def test_resources_embedded_in_a_prompt_read_back(
    pair_http_fast: tuple[Endpoint, Endpoint],
) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", NO_ROOTS) as client:
            reply = await client.get_prompt(
                "resource-prompt", {"resourceType": "Text", "resourceId": "3"}
            )
            for message in reply["result"]["messages"]:
                if message["content"]["type"] == "resource":
                    await client.read(message["content"]["resource"]["uri"], as_given=True)

    await assert_same(scenario, *pair_http_fast)


# --- row 4: a child's protocol errors flattened ------------------------------------------------


async def test_url_elicitation_error_passes_through(
    pair_http_fast: tuple[Endpoint, Endpoint],
) -> None:
    # (server-everything lets a second call with the same arguments through: a URL of its own)
    url = f"https://example.com/sign-in/{uuid.uuid4()}"

    async def scenario(run: Run) -> None:
        async with run.client("client", NO_ROOTS) as client:
            await client.call("trigger-url-elicitation", {"url": url, "errorPath": True})

    await assert_same(scenario, *pair_http_fast)


async def test_read_errors_keep_the_childs_code_message_and_data(
    pair_http_fast: tuple[Endpoint, Endpoint],
) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", NO_ROOTS) as client:
            await client.read("demo://resource/static/document/no-such-document.md")
            await client.read("demo://resource/dynamic/text/not-a-number")

    await assert_same(scenario, *pair_http_fast)


async def test_prompt_errors_keep_the_childs_code_message_and_data(
    pair_http_fast: tuple[Endpoint, Endpoint],
) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", NO_ROOTS) as client:
            await client.get_prompt("resource-prompt", {"resourceType": "Nope", "resourceId": "1"})
            await client.get_prompt("args-prompt", {})

    await assert_same(scenario, *pair_http_fast)


# --- row 5: the client's capabilities ----------------------------------------------------------


async def test_tool_list_follows_the_clients_capabilities(
    pair_http_fast: tuple[Endpoint, Endpoint],
) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", ClientSpec()) as client:
            await client.list_tools()

    await assert_same(scenario, *pair_http_fast, View(parts=("exchanges",), names_only=True))


async def test_a_tool_not_listed_to_the_client_is_refused_as_the_server_does(
    pair_http_fast: tuple[Endpoint, Endpoint],
) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", ClientSpec()) as client:
            await client.call("get-roots-list")

    await assert_same(scenario, *pair_http_fast, View(parts=("exchanges",), names_only=True))


@pytest.mark.parametrize("era", ["handshake", "auto"])
async def test_task_only_tools_need_the_tasks_capability(mounted_http: Endpoint, era: str) -> None:
    """Also for a 2026-era client (``auto``), whose tasks the launcher does not serve. (A
    2026-era list no longer says which tools need a task: a handshake-era client's list does.)"""

    async def scenario(run: Run) -> None:
        async with run.client("handshake", NO_ROOTS) as client:
            await client.list_tools()
        async with run.client("client", replace(NO_ROOTS, era=era)) as client:
            await client.list_tools()

    run = await run_scenario(scenario, mounted_http)
    handshake, client = run.clients
    needs_task = {
        tool["name"]
        for tool in handshake.reply_to("tools/list")["result"]["tools"]
        if (tool.get("execution") or {}).get("taskSupport") == "required"
    }
    assert needs_task, "server-everything lists a task-only tool (simulate-research-query)"
    connected = client.reply_to("server/discover" if era == "auto" else "initialize")
    declared = connected["result"].get("capabilities", {})
    listed = {tool["name"] for tool in client.reply_to("tools/list")["result"]["tools"]}
    assert "tasks" in declared or not needs_task & listed, (
        f"no tasks capability declared, yet task-only tools listed: {sorted(needs_task & listed)}"
    )


@pytest.mark.slow
def test_a_task_only_tool_runs_as_a_task_through_the_launcher(config: Path, tmp_path: Path) -> None:
    """A task-augmented call, then tasks/get, tasks/result and tasks/list, over raw stdio lines:
    the same answers (ids and times aside), and the task's status notifications, directly and
    mounted."""
    direct = _task_run(list(everything_argv()), "simulate-research-query", tmp_path / "direct")
    mounted = _task_run(list(launcher_argv(config)), f"{NS}_simulate-research-query", tmp_path)
    assert mounted == direct


def _task_run(argv: list[str], tool: str, folder: Path) -> list[Any]:
    folder.mkdir(exist_ok=True)
    seen: list[Any] = []
    with (folder / "stderr.log").open("w") as errlog:
        raw = RawStdio(argv, folder, stderr=errlog.fileno())
    try:

        def rpc(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
            request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            raw.send(json.dumps(request).encode())
            while True:
                line = raw.line()
                assert line is not None, f"no reply to {method}"
                message = json.loads(line)
                if message.get("id") == request_id and "method" not in message:
                    return message
                if message.get("method") == "notifications/tasks/status":
                    seen.append(("status", message["params"]["status"]))

        raw.send(INITIALIZE)
        assert raw.line() is not None
        raw.send(INITIALIZED)
        created = rpc(1, "tools/call", {"name": tool, "arguments": {"topic": "x"}, "task": {}})
        task_id = created["result"]["task"]["taskId"]
        seen.append(("created", created["result"]["task"]["status"]))
        seen.append(("get", rpc(2, "tasks/get", {"taskId": task_id})["result"]["status"]))
        result = rpc(3, "tasks/result", {"taskId": task_id})["result"]
        seen.append(("result", result["content"][0]["text"].splitlines()[0]))
        listed = rpc(4, "tasks/list", {})["result"]["tasks"]
        seen.append(("listed", [t["status"] for t in listed if t["taskId"] == task_id]))
    finally:
        raw.proc.kill()
        raw.proc.wait()
    return seen


# --- row 6: smaller differences ----------------------------------------------------------------


async def test_lists_are_the_servers_own(pair_http_fast: tuple[Endpoint, Endpoint]) -> None:
    async def scenario(run: Run) -> None:
        # (every capability, roots too: the tool list then has the same tools on both sides)
        async with run.client(
            "client", ClientSpec(sampling=True, elicitation=True, roots=())
        ) as client:
            await client.list_tools()
            await client.list_prompts()
            await client.list_resources()
            await client.list_templates()

    await assert_same(scenario, *pair_http_fast, View(parts=("exchanges",)))


@pytest.mark.slow
async def test_no_extra_roots_request(config: Path) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", FULL) as client:
            await client.wait_for("the roots sync", ROOTS_SYNCED)
            await client.list_tools()
            await client.call("echo", {"message": "hi"})

    await assert_same(
        scenario, direct_stdio(), mounted_stdio(config), View(parts=("server requests",))
    )


@pytest.mark.slow
async def test_cancelled_request_gets_no_reply_over_http(
    direct_http: Endpoint, mounted_http: Endpoint
) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", NO_ROOTS) as client:
            await client.call_then_cancel(
                "trigger-long-running-operation", {"duration": 30, "steps": 30}, timeout=3
            )

    # (only the replies: server-everything keeps sending the progress of what it was told to drop)
    await assert_same(scenario, direct_http, mounted_http, View(parts=("exchanges",)))


@pytest.mark.slow
async def test_reload_that_changes_nothing_sends_no_list_changed(
    direct_http: Endpoint, config: Path, tmp_path: Path
) -> None:
    errlog = tmp_path / "launcher.log"
    with http_launcher(config, errlog=errlog) as launched:

        async def reload(run: Run) -> None:
            """SIGHUP to the launcher, and back once it says it reloaded (a direct server has
            no config: nothing happens)."""
            if run.endpoint is direct_http:
                return
            before = errlog.read_text().count("reloaded ")
            launched.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + WAIT_TIMEOUT * 4
            while errlog.read_text().count("reloaded ") == before:
                assert time.monotonic() < deadline, errlog.read_text()
                await anyio.sleep(0.05)

        async def scenario(run: Run) -> None:
            async with run.client("client", NO_ROOTS) as client:
                await client.list_tools()
                await client.list_prompts()
                await client.list_resources()
                async with client.step("reload the launcher's config, unchanged"):
                    await reload(run)
                await client.wait_for(
                    "a list_changed",
                    lambda message: str(message.get("method")).endswith("/list_changed"),
                    timeout=3,
                )

        await assert_same(
            scenario, direct_http, mounted_over_http(launched), View(parts=("notifications",))
        )


@pytest.mark.slow
async def test_a_log_message_outside_any_call_reaches_the_one_http_client(
    direct_http: Endpoint, tmp_path: Path
) -> None:
    """server-everything's simulated logging (one message at once, then one every 5 s, each
    outside any call) through a shared session: with one HTTP client connected, it is that
    client's, on its GET stream as on a direct connection. (With a session per client, the
    default, every message of its session is its client's.)"""
    config = mount_config(
        tmp_path / "tools.yaml",
        everything_argv(),
        mount=MOUNT,
        namespace=NS,
        extra="sessions: shared",
    )
    logged = is_notification("notifications/message")

    async def scenario(run: Run) -> None:
        async with run.client("client", NO_ROOTS) as client:
            await client.call("toggle-simulated-logging")
            try:
                await client.wait_for("a log message after the call", logged, count=2, timeout=9)
            finally:
                await client.call("toggle-simulated-logging")

    # (the steps and whether the message came: the levels are random, and the toggle's text
    # names the session)
    with http_launcher(config, errlog=tmp_path / "launcher.log") as launched:
        await assert_same(scenario, direct_http, mounted_over_http(launched), View(parts=()))


@pytest.mark.slow
async def test_a_resource_update_outside_any_call_reaches_the_http_client(
    direct_http: Endpoint, mounted_http: Endpoint
) -> None:
    """server-everything's simulated updates of a subscribed resource: one at once, then one
    every 5 s, each sent outside any call."""
    uri = "demo://resource/static/document/features.md"

    async def scenario(run: Run) -> None:
        async with run.client("client", NO_ROOTS) as client:
            shown = run.endpoint.uri(uri)
            await client.request(
                "subscribe", lambda: client.s.subscribe_resource(shown), "resources/subscribe"
            )
            await client.call("toggle-subscriber-updates")
            try:
                await client.wait_for(
                    "an update after the call",
                    is_notification("notifications/resources/updated", uri=shown),
                    count=2,
                    timeout=9,
                )
            finally:
                await client.call("toggle-subscriber-updates")
                await client.request(
                    "unsubscribe",
                    lambda: client.s.unsubscribe_resource(shown),
                    "resources/unsubscribe",
                )

    await assert_same(scenario, direct_http, mounted_http, View(parts=()))


# --- row 8: quiet logs ---------------------------------------------------------------------------


async def test_unknown_resource_read_logs_at_most_one_line(mounted_http: Endpoint) -> None:
    errlog = mounted_http.errlog
    assert errlog is not None
    logged: list[str] = []

    async def scenario(run: Run) -> None:
        async with run.client("client", NO_ROOTS) as client:
            await client.ping()
            before = len(errlog.read_text().splitlines())
            await client.read("demo://resource/dynamic/text/not-a-number")
            await client.ping()  # (the launcher logs before it answers; one more round trip)
            logged.extend(errlog.read_text().splitlines()[before:])

    await run_scenario(scenario, mounted_http)
    # (the child's own stderr, prefixed with its name, says what it likes when it likes: a
    # roots request of its start-up can land here)
    ours = [line for line in logged if not line.startswith(f"[{mounted_http.mount}]")]
    assert len(ours) <= 1, "\n".join(logged)


# --- 2026-era (stateless) clients: what the handshake-era direct connection gives ---------------

# A 2026-era client (the SDK's Client(mode="auto")) probes server/discover; server-everything
# 2026.8.31 does not speak the 2026 protocol, so directly the client falls back to the
# handshake, while through the launcher it stays 2026-era (each request stateless). The
# comparison leaves out what the era itself changes (View(era_neutral=True)).
STATELESS = ClientSpec(sampling=True, elicitation=True, era="auto")


async def test_a_2026_era_client_gets_the_childs_json_rpc_errors(
    pair_http_fast: tuple[Endpoint, Endpoint],
) -> None:
    url = f"https://example.com/sign-in/{uuid.uuid4()}"

    async def scenario(run: Run) -> None:
        async with run.client("client", STATELESS) as client:
            await client.call("trigger-url-elicitation", {"url": url, "errorPath": True})
            await client.call("echo", {"message": "still there"})
            await client.call(
                "trigger-long-running-operation", {"duration": 0.4, "steps": 2}, progress=True
            )
            reply = await client.call("get-resource-links", {"count": 2})
            for block in reply["result"]["content"]:
                if block["type"] == "resource_link":
                    await client.read(block["uri"], as_given=True)

    await assert_same(scenario, *pair_http_fast, View(era_neutral=True))
