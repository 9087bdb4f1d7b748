"""External servers mounted by ``command:`` and ``url:`` through a real ``dpt-launch`` over stdio."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from doc_processing_std_tools.embedded_redis import free_port
from helpers.launch import launched, launcher_command, text_of, tool_names
from helpers.paths import SERVERS
from helpers.processes import alive, child_pids, cmdline, pids_with
from helpers.waiting import until

EXTERNAL = SERVERS / "external_server.py"
RESULTS = SERVERS / "results_server.py"  # a tool for each part of a result


def run_check(config: Path) -> subprocess.CompletedProcess[str]:
    """``dpt-launch --config CONFIG --check``, run as a user runs it."""
    return subprocess.run(
        [*launcher_command(), "--config", str(config), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def external_entry(name: str, counter: Path, extra: str = "") -> str:
    return f"  {name}:\n    command: {sys.executable}\n    args: [{EXTERNAL}, {counter}]\n{extra}"


async def test_stdio_servers_are_mounted_namespaced_filtered_and_serialized(
    write_config, tmp_path: Path
) -> None:
    counter = tmp_path / "count"
    config = write_config(
        "servers:\n"
        + external_entry(
            "ext",
            counter,
            "    namespace: ext\n    tools: {exclude: ['delete_*']}\n",
        )
        + f"  mem:\n    command: {sys.executable}\n"
        "    args: [-m, doc_processing_std_tools.memory]\n"
        f"    env: {{DPTTOOLS_MEMORY_DIR: {tmp_path / 'mem'}}}\n"
        "    namespace: m\n"
        "    tools: {include: ['*_memory']}\n"
    )
    async with launched(config) as session:
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert {"ext_bump", "ext_whoami", "ext_nap", "m_write_memory", "m_read_memory"} <= names
        assert "ext_delete_everything" not in names  # excluded
        assert not any(n.startswith("m_") and not n.endswith("_memory") for n in names)
        pid = int(text_of(await session.call_tool("ext_whoami", {})))
        async with anyio.create_task_group() as group:
            for _ in range(50):
                group.start_soon(session.call_tool, "ext_bump", {})
        assert counter.read_text() == "50"  # one lock across every mounted server
        assert int(text_of(await session.call_tool("ext_whoami", {}))) == pid  # one child
        await session.call_tool("m_write_memory", {"key": "k", "value": "v"})
        assert text_of(await session.call_tool("m_read_memory", {"key": "k"})) == "v"
        refused = await session.call_tool("ext_delete_everything", {})
        assert refused.is_error


@pytest.mark.slow
async def test_a_call_past_its_timeout_is_an_error_naming_the_server(
    write_config, tmp_path: Path
) -> None:
    config = write_config(
        "servers:\n" + external_entry("slowpoke", tmp_path / "c", "    timeout: 0.5\n")
    )
    async with launched(config) as session:
        with anyio.fail_after(10):
            result = await session.call_tool("nap", {"seconds": 5})
        assert result.is_error
        assert "slowpoke" in text_of(result) and "0.5 s" in text_of(result)
        assert text_of(await session.call_tool("nap", {"seconds": 0})) == "rested"


@pytest.mark.slow  # waits out real timeouts
async def test_each_call_in_flight_ends_at_its_own_servers_timeout(
    write_config, tmp_path: Path
) -> None:
    """Two relayed calls in flight on servers with different timeouts: the shorter timeout,
    though its call started later, ends first, and the longer one after it."""
    config = write_config(
        "servers:\n"
        + external_entry("patient", tmp_path / "p", "    timeout: 4\n    namespace: p\n")
        + external_entry("hasty", tmp_path / "h", "    timeout: 0.5\n    namespace: h\n")
    )
    ended: list[tuple[str, str]] = []

    async def call(session, tool: str) -> None:
        result = await session.call_tool(tool, {"seconds": 30, "marker": str(tmp_path / tool)})
        assert result.is_error, text_of(result)
        ended.append((tool, text_of(result)))

    async with launched(config) as session:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(call, session, "p_nap_and_mark")  # (read-only: no lock)
                group.start_soon(call, session, "h_nap_and_mark")
    assert [tool for tool, _ in ended] == ["h_nap_and_mark", "p_nap_and_mark"], ended
    hasty, patient = (text for _, text in ended)
    assert "server 'hasty'" in hasty and "timeout of 0.5 s" in hasty, hasty
    assert "server 'patient'" in patient and "timeout of 4 s" in patient, patient


@pytest.mark.slow
def test_collision_between_external_and_in_process_is_refused(write_config, tmp_path) -> None:
    config = write_config(
        f"servers:\n  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
        f"  mem2:\n    command: {sys.executable}\n    args: [-m, doc_processing_std_tools.memory]\n"
    )
    proc = run_check(config)
    assert proc.returncode == 2
    assert "provided by both 'memory-tools' and 'mem2'" in proc.stderr
    assert "servers.mem2.namespace" in proc.stderr
    assert "servers.mem2.tools.exclude: [write_memory]" in proc.stderr  # the other fix


@pytest.mark.slow
def test_a_missing_command_is_skipped_unless_required(write_config, tmp_path) -> None:
    optional = write_config(
        f"servers:\n  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
        "  ghost:\n    command: /no/such/mcp-server\n"
    )
    check = run_check(optional)
    assert check.returncode == 1, check.stderr  # --check: it will not serve
    assert "servers.ghost not mounted" in check.stderr
    assert "write_memory" in check.stdout
    required = write_config(
        "servers:\n  ghost:\n    command: /no/such/mcp-server\n    required: true\n",
        name="required.yaml",
    )
    proc = subprocess.run(
        [*launcher_command(), "--config", str(required)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1
    assert "servers.ghost" in proc.stderr and "/no/such/mcp-server" in proc.stderr
    assert "Traceback" not in proc.stderr


async def test_the_missing_command_does_not_stop_the_others_serving(write_config, tmp_path) -> None:
    config = write_config(
        f"servers:\n  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
        "  ghost:\n    command: /no/such/mcp-server\n"
    )
    async with launched(config) as session:
        written = await session.call_tool("write_memory", {"key": "k", "value": "v"})
        assert not written.is_error, text_of(written)
        assert text_of(await session.call_tool("read_memory", {"key": "k"})) == "v"


@pytest.fixture
def http_server(http_server_process: tuple[str, subprocess.Popen[bytes]]) -> str:
    return http_server_process[0]


@pytest.fixture
def http_server_process(tmp_path: Path):
    """external_server.py over streamable HTTP: (its URL, its process)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(EXTERNAL), str(tmp_path / "http-count"), "--http", str(port)],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp", proc
    proc.send_signal(signal.SIGCONT)
    proc.terminate()
    proc.wait(10)


async def test_a_url_server_is_mounted(write_config, http_server: str, tmp_path) -> None:
    config = write_config(f"servers:\n  web:\n    url: {http_server}\n    namespace: web\n")
    async with launched(config) as session:
        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(session.call_tool, "web_bump", {})
        assert (tmp_path / "http-count").read_text() == "20"


@pytest.mark.slow
def test_sigkill_of_the_launcher_leaves_no_child(write_config, tmp_path) -> None:
    config = write_config("servers:\n" + external_entry("ext", tmp_path / "c"))
    proc = subprocess.Popen(
        [*launcher_command(), "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        children: list[int] = []
        while time.monotonic() < deadline and not children:
            time.sleep(0.2)
            children = child_pids(proc.pid)
        assert children, "the external server never started"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(pid) for pid in children):
        time.sleep(0.1)
    assert not any(alive(pid) for pid in children)


@pytest.mark.slow  # (a lifecycle test: waits out a real kill, restart or timeout)
async def test_a_killed_child_is_restarted_and_the_rest_keeps_working(
    write_config, tmp_path: Path
) -> None:
    config = write_config(
        "servers:\n"
        + external_entry("ext", tmp_path / "c", "    namespace: ext\n")
        + f"  memory-tools:\n    settings: {{memory_dir: {tmp_path / 'm'}}}\n"
    )
    async with launched(config) as session:
        pid = int(text_of(await session.call_tool("ext_whoami", {})))
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(10):
            while True:  # the supervisor notices within its watch interval
                down = await session.call_tool("ext_whoami", {})
                if down.is_error:
                    break
                await anyio.sleep(0.1)
        assert "server 'ext' is restarting (attempt 1)" in text_of(down)
        assert "ext_bump" in {t.name for t in (await session.list_tools()).tools}  # still listed
        written = await session.call_tool("write_memory", {"key": "k", "value": "v"})
        assert not written.is_error, text_of(written)  # others unaffected
        with anyio.fail_after(35):
            while True:
                result = await session.call_tool("ext_whoami", {})
                if not result.is_error:
                    break
                await anyio.sleep(0.25)
        assert int(text_of(result)) != pid


@pytest.mark.slow
async def test_prompts_and_resources_are_mounted_namespaced(write_config, tmp_path: Path) -> None:
    config = write_config(
        "servers:\n" + external_entry("ext", tmp_path / "c", "    namespace: ext\n")
    )
    async with launched(config) as session:
        prompts = {p.name for p in (await session.list_prompts()).prompts}
        assert "ext_greeting" in prompts
        rendered = await session.get_prompt("ext_greeting", {"name": "Ada"})
        assert "Ada" in rendered.messages[0].content.text
        uris = {str(r.uri) for r in (await session.list_resources()).resources}
        assert "note://ext/today" in uris
        read = await session.read_resource("note://ext/today")
        assert read.contents[0].text == "a note from the external server"


@pytest.mark.slow  # (a lifecycle test: waits out a real kill, restart or timeout)
async def test_a_timed_out_call_is_cancelled_at_the_server(write_config, tmp_path: Path) -> None:
    marker = tmp_path / "cancelled"
    config = write_config(
        "servers:\n" + external_entry("ext", tmp_path / "c", "    timeout: 0.5\n")
    )
    async with launched(config) as session:
        result = await session.call_tool("nap_and_mark", {"seconds": 30, "marker": str(marker)})
        assert result.is_error
        with anyio.fail_after(10):
            while not marker.exists():
                await anyio.sleep(0.1)
    assert marker.read_text() == "cancelled"


async def test_results_pass_through_the_launcher_unchanged(write_config, tmp_path: Path) -> None:
    """Text, structured content, _meta, isError and progress: as the server sent them."""
    config = write_config(
        f"servers:\n  ext:\n    command: {sys.executable}\n    args: [{RESULTS}]\n    namespace: ext\n"
    )
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async with launched(config) as session:
        shaped = await session.call_tool("ext_shaped", {})
        assert not shaped.is_error
        assert text_of(shaped) == "two items"
        assert shaped.structured_content == {"items": ["a", "b"]}
        assert shaped.meta == {"source": "external"}
        failed = await session.call_tool("ext_fail", {})
        assert failed.is_error and "the external tool refused" in text_of(failed)
        bad = await session.call_tool("ext_count_to", {"steps": "many"})
        assert bad.is_error and "steps" in text_of(bad)
        counted = await session.call_tool(
            "ext_count_to", {"steps": 3}, progress_callback=on_progress
        )
        assert text_of(counted) == "counted"
        with anyio.fail_after(10):
            while len(reports) < 3:  # progress notifications may trail the result
                await anyio.sleep(0.05)
    assert reports == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_external_calls_are_relayed_on_the_session_not_through_fastmcp(
    tmp_path: Path,
) -> None:
    """The composed server's own tools/call path is not used for an external tool (per-call cost)."""
    from fastmcp import Client

    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config

    config = tmp_path / "tools.yaml"
    config.write_text(
        "servers:\n"
        + external_entry(
            "ext", tmp_path / "c", "    namespace: ext\n    tools: {exclude: [delete_*]}\n"
        )
    )
    composition = await compose(load_config(config))
    through_fastmcp: list[str] = []
    call_tool = composition.root.call_tool

    async def spy(name: str, *args: object, **kwargs: object) -> object:
        through_fastmcp.append(name)
        return await call_tool(name, *args, **kwargs)  # type: ignore[arg-type]

    composition.root.call_tool = spy  # type: ignore[method-assign]
    try:
        async with Client(composition.root, mode="legacy") as client:
            assert (await client.call_tool("ext_bump", {})).data == 1
            excluded = await client.call_tool_mcp("ext_delete_everything", {})
            assert excluded.is_error and "ext_delete_everything" in excluded.content[0].text
        assert set(through_fastmcp) == {"ext_delete_everything"}  # filtered out: not relayed
        async with Client(composition.root) as client:  # a 2026-era client: relayed too
            assert (await client.call_tool("ext_bump", {})).data == 2
        assert set(through_fastmcp) == {"ext_delete_everything"}
    finally:
        await composition.aclose()
    assert (tmp_path / "c").read_text() == "2"


async def test_a_servers_json_rpc_error_reaches_the_client_on_every_path(tmp_path: Path) -> None:
    """Relayed (either era) or through fastmcp (here: root middleware that must see calls), a
    server's JSON-RPC error for a call is that error for the client: its code, message and data."""
    from fastmcp import Client
    from fastmcp.server.middleware import Middleware
    from mcp.shared.exceptions import MCPError

    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config

    config = tmp_path / "tools.yaml"
    config.write_text(
        f"servers:\n  ext:\n    command: {sys.executable}\n"
        f"    args: ['{SERVERS / 'raw_child.py'}']\n    namespace: ext\n"
    )
    composition = await compose(load_config(config))
    errors = []
    try:
        for sees_calls in (False, True):
            if sees_calls:
                composition.root.add_middleware(Middleware())  # (the relay steps aside)
            for mode in ("legacy", "auto"):
                async with Client(composition.root, mode=mode) as client:
                    with pytest.raises(MCPError) as raised:
                        await client.call_tool_mcp("ext_refuses", {})
                    errors.append(raised.value.error.model_dump(exclude_none=True))
                    assert (await client.call_tool_mcp("ext_fine", {})).content[0].text == "fine"
    finally:
        await composition.aclose()
    expected = {
        "code": -32042,
        "message": "This request requires browser-based authorization.",
        "data": {
            "elicitations": [{"mode": "url", "url": "https://example.com", "elicitationId": "e"}]
        },
    }
    assert errors == [expected] * 4


@pytest.mark.slow  # (a lifecycle test: waits out a real kill, restart or timeout)
async def test_a_call_in_flight_when_the_child_dies_says_it_is_restarting(
    write_config, tmp_path: Path
) -> None:
    config = write_config(
        "servers:\n" + external_entry("ext", tmp_path / "c", "    namespace: ext\n")
    )
    async with launched(config) as session:
        pid = int(text_of(await session.call_tool("ext_whoami", {})))
        outcome = []
        started = tmp_path / "napping"

        async def nap() -> None:
            arguments = {"seconds": 30, "started": str(started)}
            outcome.append(await session.call_tool("ext_nap", arguments))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(nap)
                await until(started.exists, "the nap to start in the child")
                os.kill(pid, signal.SIGKILL)
        assert outcome[0].is_error
        assert "server 'ext' is restarting (attempt 1)" in text_of(outcome[0])


@pytest.mark.slow
async def test_a_client_cancellation_of_a_relayed_call_reaches_the_server(
    write_config, tmp_path: Path
) -> None:
    marker, started = tmp_path / "cancelled", tmp_path / "napping"
    config = write_config("servers:\n" + external_entry("ext", tmp_path / "c"))
    async with launched(config) as session:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                arguments = {"seconds": 30, "marker": str(marker), "started": str(started)}
                group.start_soon(session.call_tool, "nap_and_mark", arguments)
                await until(started.exists, "the nap to start in the child")
                group.cancel_scope.cancel()  # the SDK client sends notifications/cancelled
            while not marker.exists():
                await anyio.sleep(0.1)
        assert marker.read_text() == "cancelled"
        assert text_of(await session.call_tool("nap", {"seconds": 0})) == "rested"  # still serving


async def test_stdio_calls_reach_the_server_on_the_fast_path(write_config, tmp_path: Path) -> None:
    """Over stdio a relayed call goes to the child with the launcher's own id, not via the SDK
    session (whose ids are integers); text that is not valid Unicode still gets an answer."""
    config = write_config(
        f"servers:\n  ext:\n    command: {sys.executable}\n    args: [{RESULTS}]\n    namespace: ext\n"
    )
    async with launched(config) as session:
        seen = {text_of(await session.call_tool("ext_request_id", {})) for _ in range(3)}
        assert len(seen) == 3 and all(value.startswith("dpt~") for value in seen), seen
        text = "caf\u00e9 \u2603 \U0001f600 " + "x" * 100_000
        assert text_of(await session.call_tool("ext_echo", {"text": text})) == text


async def test_overlapping_relayed_calls_keep_their_own_replies(
    write_config, tmp_path: Path
) -> None:
    config = write_config(
        f"servers:\n  ext:\n    command: {sys.executable}\n    args: [{RESULTS}]\n    namespace: ext\n"
    )
    async with launched(config) as session:
        replies: dict[int, str] = {}

        async def echo(n: int) -> None:
            replies[n] = text_of(await session.call_tool("ext_echo", {"text": f"reply {n}"}))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for n in range(100):
                    group.start_soon(echo, n)
        assert replies == {n: f"reply {n}" for n in range(100)}


@pytest.mark.slow  # (a lifecycle test: waits out a real kill, restart or timeout)
async def test_a_hung_url_server_times_out_on_time(
    write_config, http_server_process: tuple[str, subprocess.Popen[bytes]]
) -> None:
    """The SDK tells a server of an abandoned call with a write that waits up to 5 s for a
    hung server; the caller's timeout must not wait for it."""
    url, proc = http_server_process
    config = write_config(f"servers:\n  web:\n    url: {url}\n    timeout: 1\n")
    async with launched(config) as session:
        assert not (await session.call_tool("whoami", {})).is_error
        proc.send_signal(signal.SIGSTOP)
        try:
            for _ in range(2):
                with anyio.fail_after(4.5):  # (6 s and more when the courtesy write is awaited)
                    result = await session.call_tool("bump", {})
                assert result.is_error
                assert "server 'web' did not finish 'bump' within its timeout of 1 s" in (
                    text_of(result)
                )
        finally:
            proc.send_signal(signal.SIGCONT)


@pytest.mark.slow  # waits out a real timeout
async def test_a_call_that_waits_for_the_lock_past_its_timeout_says_so(
    write_config, tmp_path: Path
) -> None:
    """The timeout also bounds the wait for the process lock; the error says that it waited,
    not that the server was slow, and nothing reached the server."""
    config = write_config(
        "servers:\n"
        + external_entry("slow", tmp_path / "slow-count", "    namespace: slow\n")
        + external_entry(
            "quick", tmp_path / "quick-count", "    namespace: quick\n    timeout: 0.5\n"
        )
    )
    async with launched(config) as session:
        outcome: dict[str, object] = {}
        started = tmp_path / "holding"

        async def hold() -> None:
            arguments = {"seconds": 3, "started": str(started)}
            outcome["hold"] = await session.call_tool("slow_hold", arguments)

        async with anyio.create_task_group() as group:
            group.start_soon(hold)
            await until(started.exists, "the hold to run, under the lock")
            bumped = await session.call_tool("quick_bump", {})
        assert bumped.is_error
        assert "'quick_bump' did not start within its timeout of 0.5 s" in text_of(bumped)
        assert "process lock" in text_of(bumped) and "nothing was done" in text_of(bumped)
        assert not (tmp_path / "quick-count").exists()
        assert text_of(outcome["hold"]) == "held"


def test_url_secrets_stay_out_of_messages(write_config) -> None:
    config = write_config(
        "servers:\n  gone:\n"
        f"    url: http://alice:hunter2@127.0.0.1:{free_port()}/mcp?token=hunter2&x=1\n"
    )
    proc = run_check(config)
    assert proc.returncode == 1
    assert "hunter2" not in proc.stderr + proc.stdout
    assert "servers.gone" in proc.stderr and "***@127.0.0.1" in proc.stderr
    assert "token=***&x=***" in proc.stderr
    assert "connection refused" in proc.stderr and "Error" not in proc.stderr


@pytest.mark.slow
def test_a_url_that_refuses_the_credentials_says_so(write_config) -> None:
    """A 401 is named as such (the SDK's own text: "Server returned an error response")."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        config = write_config(
            "servers:\n  web:\n"
            f"    url: http://127.0.0.1:{httpd.server_port}/mcp\n"
            "    headers: {Authorization: Bearer wrong}\n"
            "    required: true\n"
        )
        proc = subprocess.run(
            [*launcher_command(), "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    finally:
        httpd.shutdown()
    assert proc.returncode == 1
    assert "servers.web" in proc.stderr
    assert "HTTP 401: the server refused the credentials" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("url: 'http://'", ":3: servers.web.url: the URL names no host"),
        ("url: 'http://127.0.0.1:99999/mcp'", ":3: servers.web.url: not a usable URL"),
        (
            "url: http://127.0.0.1:1/mcp\n    headers: {'Bad Header': x}",
            ":4: servers.web.headers: 'Bad Header' is not a valid HTTP header name",
        ),
    ],
)
def test_a_url_that_cannot_work_is_a_config_error(write_config, entry: str, expected: str) -> None:
    config = write_config(f"servers:\n  web:\n    {entry}\n")
    proc = run_check(config)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr


@pytest.mark.slow
def test_a_prompt_or_resource_collision_is_refused(write_config, tmp_path: Path) -> None:
    """Their tools are told apart by filters, but both serve the prompt 'greeting': fastmcp
    would let the first win, silently."""
    config = write_config(
        "servers:\n"
        + external_entry("one", tmp_path / "1", "    tools: {include: [whoami]}\n")
        + external_entry("two", tmp_path / "2", "    tools: {include: [nap]}\n")
    )
    proc = run_check(config)
    assert proc.returncode == 2, proc.stderr
    assert "prompt collision: 'greeting' is provided by both 'one' and 'two'" in proc.stderr
    assert "servers.two.namespace: two" in proc.stderr


def test_a_tools_glob_that_matches_nothing_is_warned(write_config, tmp_path: Path) -> None:
    config = write_config(
        "servers:\n"
        + external_entry(
            "ext",
            tmp_path / "c",
            "    namespace: ext\n    tools: {include: ['*'], exclude: [ext_bump, whoamii]}\n",
        )
    )
    proc = run_check(config)
    assert proc.returncode == 0, proc.stderr  # (a warning, not a failure)
    out = " ".join(proc.stdout.split())
    assert "WARN servers.ext: tools.exclude: 'whoamii' matches none of its tools" in out, out
    assert "'ext_bump' matches none" not in out  # (globs match the namespaced name too)
    assert "ext_bump" not in out.split("matches none")[0]  # (and it is left out)
    assert "tools.include" not in out  # '*' matched


async def test_a_tools_glob_matches_the_name_clients_see(write_config, tmp_path: Path) -> None:
    """``get.issue`` is ``odd_get_issue`` to clients: excluding that name leaves it out."""
    config = write_config(
        "servers:\n  odd:\n"
        f"    command: {sys.executable}\n    args: [{SERVERS / 'odd_names_server.py'}]\n"
        "    namespace: odd\n    tools: {exclude: [odd_get_issue]}\n"
    )
    async with launched(config) as client:
        names = await tool_names(client)
    assert "odd_list_issues" in names
    assert not any("get" in name for name in names), names


def wrapper_with_a_helper(tmp_path: Path, marker: str) -> Path:
    """A shell wrapper, as many installed servers are: it starts a helper that ignores SIGTERM
    and holds the server's stdout, then runs the server without ``exec``."""
    script = tmp_path / "wrapper.sh"
    helper = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    script.write_text(
        "#!/bin/sh\n"
        f"{sys.executable} -c '{helper}' {marker} &\n"
        f"{sys.executable} {EXTERNAL} {tmp_path / 'count'}\n"
    )
    script.chmod(0o755)
    return script


@pytest.mark.slow  # (a lifecycle test: waits out a real kill, restart or timeout)
async def test_a_wrapped_server_that_dies_is_noticed_and_leaves_nothing(
    write_config, tmp_path: Path
) -> None:
    """Its helper keeps the stdout pipe open: the server's exit is still seen at once (not when
    a ping times out, 20 s later), and the helper ends with the session."""
    marker = f"helper-{os.getpid()}-{time.monotonic_ns()}"
    script = wrapper_with_a_helper(tmp_path, marker)
    config = write_config(f"servers:\n  wrapped:\n    command: {script}\n")
    async with launched(config) as session:
        pid = int(text_of(await session.call_tool("whoami", {})))
        assert pids_with(marker)
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(10):
            while not (await session.call_tool("whoami", {})).is_error:
                await anyio.sleep(0.1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and pids_with(marker):
        time.sleep(0.1)
    assert not pids_with(marker)


@pytest.mark.slow
def test_sigkill_of_the_launcher_ends_a_wrapped_server_and_its_helpers(
    write_config, tmp_path: Path
) -> None:
    """PR_SET_PDEATHSIG reaches one process; the shim ends the command's whole process group,
    a helper that ignores SIGTERM included."""
    marker = f"helper-{os.getpid()}-{time.monotonic_ns()}"
    script = wrapper_with_a_helper(tmp_path, marker)
    config = write_config(f"servers:\n  wrapped:\n    command: {script}\n")
    proc = subprocess.Popen(
        [*launcher_command(), "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (pids_with(marker) and pids_with(str(EXTERNAL))):
            time.sleep(0.2)
        server = [pid for pid in pids_with(str(EXTERNAL)) if str(tmp_path) in cmdline(pid)]
        assert pids_with(marker) and server, "the wrapped server never started"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (pids_with(marker) or any(map(alive, server))):
        time.sleep(0.1)
    assert not pids_with(marker) and not any(map(alive, server))


@pytest.mark.slow
def test_a_huge_stderr_line_is_cut_and_a_missing_cwd_is_named(write_config, tmp_path: Path) -> None:
    script = tmp_path / "noisy.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'{sys.executable} -c \'import sys; sys.stderr.write("x" * 1000000 + "\\n")\'\n'
        f"exec {sys.executable} {EXTERNAL} {tmp_path / 'count'}\n"
    )
    script.chmod(0o755)
    config = write_config(
        f"servers:\n  noisy:\n    command: {script}\n"
        f"  lost:\n    command: {sys.executable}\n    args: [{EXTERNAL}, {tmp_path / 'c2'}]\n"
        "    cwd: ./no-such-folder\n    namespace: lost\n"
    )
    proc = run_check(config)
    cut = [line for line in proc.stderr.splitlines() if line.startswith("[noisy] xxx")]
    assert cut and cut[0].endswith("[line cut at 8 KB]") and len(cut[0]) < 9000
    assert max(map(len, proc.stderr.splitlines())) < 9000
    assert f"its cwd {tmp_path / 'no-such-folder'} is not a folder" in proc.stderr
