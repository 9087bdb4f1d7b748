"""What a server is told, and what it sends beyond the protocol's vocabulary, directly and
mounted in ``dpt-launch``: tests/helpers/servers/probe_server.py reports what its client told it (the reference
servers never show it), and sends a notification no MCP client knows. Also the launcher's own
JSON-RPC edges and its memory with an overlong line (issue #34 rows 6-8), and the harness itself.

The probe speaks stdio only: the HTTP cases compare a launcher serving HTTP against direct
stdio connections. Needs no node.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.differential import (
    ClientSpec,
    Endpoint,
    Names,
    Run,
    Scenario,
    View,
    assert_same,
    compare,
    diff,
    launcher_argv,
    mount_config,
    normalized,
    run_scenario,
    served_over_http,
    stdio_endpoint,
)
from helpers.launch import http_launcher
from helpers.paths import REPO, SERVERS
from helpers.stdio_wire import INITIALIZE, INITIALIZED, RawStdio

DOCS = REPO / "docs"
PROBE = (sys.executable, str(SERVERS / "probe_server.py"))
NS, MOUNT = "pr", "probe"
SPEC = ClientSpec(name="differential-client", version="1.0.0", sampling=True)


def probe_config(path: Path, extra: str = "") -> Path:
    return mount_config(path, PROBE, mount=MOUNT, namespace=NS, extra=extra)


def direct() -> Endpoint:
    return stdio_endpoint("direct stdio", PROBE)


@pytest.fixture(scope="module")
def shared_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return probe_config(tmp_path_factory.mktemp("probe") / "tools.yaml")


@pytest.fixture(scope="module")
def mounted_http(shared_config: Path) -> Iterator[Endpoint]:
    """One launcher for the module: each case looks at what it did itself."""
    with http_launcher(shared_config, errlog=shared_config.parent / "launcher.log") as launched:
        yield Endpoint("mounted http", url=launched.url, namespace=NS, mount=MOUNT)


@pytest.fixture(params=[pytest.param("stdio", marks=pytest.mark.slow), "http"])
def mounted(request: pytest.FixtureRequest, tmp_path: Path) -> Endpoint:
    """The probe mounted, over each transport."""
    if request.param == "http":
        return request.getfixturevalue("mounted_http")
    config = probe_config(tmp_path / "tools.yaml")
    return stdio_endpoint(
        "mounted stdio",
        launcher_argv(config),
        namespace=NS,
        mount=MOUNT,
        cwd=tmp_path,
        errlog=tmp_path / "launcher.log",
    )


# --- the harness itself --------------------------------------------------------------------------


async def test_the_comparison_catches_a_difference() -> None:
    """Two runs of one scenario on one server are the same; a run whose client says another
    name is reported, with the line that differs."""

    def told(name: str) -> Scenario:
        async def scenario(run: Run) -> None:
            async with run.client("client", ClientSpec(name=name)) as client:
                await client.call("seen", {"what": "clientInfo"})

        return scenario

    assert not await compare(told("one"), direct(), direct())
    one, two = await run_scenario(told("one"), direct()), await run_scenario(told("two"), direct())
    found = diff(one, two).splitlines()
    assert any(line.startswith("-") and '\\"name\\": \\"one\\"' in line for line in found), found
    assert any(line.startswith("+") and '\\"name\\": \\"two\\"' in line for line in found), found


def test_names_and_volatile_values_map_back() -> None:
    """What a mounted server's names become is undone; ids, times and tokens are placeholders."""
    names = Names(Endpoint("mounted", url="http://x", namespace="ev", mount="everything"))
    mounted = {
        "tools": [{"name": "ev_echo"}, {"name": "other"}],
        "uri": "demo://ev/resource/1",
        "text": "see demo://ev/a and file://ev/b at 10:31:02 AM, id 123e4567-e89b-12d3-a456-426614174000",
        "logger": "everything/everything-server",
        "progressToken": 7,
        "progress": 1.0,
        "blob": "UmVzb3VyY2UgMTogYXQgMTA6MzE6MDIgQU0=",  # "Resource 1: at 10:31:02 AM"
    }
    assert normalized(mounted, names) == {
        "tools": [{"name": "echo"}, {"name": "other"}],
        "uri": "demo://resource/1",
        "text": "see demo://a and file://b at <time>, id <uuid>",
        "logger": "everything-server",
        "progressToken": "<token>",
        "progress": 1,
        "blob": "base64 of: Resource 1: at <time>",
    }
    direct_names = Names(Endpoint("direct", url="http://x"))
    assert normalized({"name": "ev_echo", "uri": "demo://ev/x"}, direct_names) == {
        "name": "ev_echo",
        "uri": "demo://ev/x",
    }


# --- issue 34, rows 5 and 6: what the child is told ---------------------------------------------


async def test_the_child_is_told_who_its_client_is(mounted: Endpoint) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", SPEC) as client:
            await client.call("seen", {"what": "clientInfo"})
            await client.call("seen", {"what": "capabilities"})

    await assert_same(scenario, direct(), mounted)


async def test_log_level_reaches_the_child(mounted: Endpoint) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", SPEC) as client:
            await client.set_level("error")
            await client.call("seen", {"what": "levels"})

    await assert_same(scenario, direct(), mounted)


async def test_custom_notifications_reach_the_client(mounted: Endpoint) -> None:
    async def scenario(run: Run) -> None:
        async with run.client("client", SPEC) as client:
            await client.call("custom")

    await assert_same(scenario, direct(), mounted, View(parts=("exchanges", "notifications")))


@pytest.fixture(params=[pytest.param("stdio", marks=pytest.mark.slow), "http"])
def url_pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Endpoint, Endpoint]]:
    """(direct, mounted) for the probe over streamable HTTP, mounted as a ``url:`` server in a
    launcher served over each transport."""
    argv = (sys.executable, str(SERVERS / "probe_http_server.py"))
    with served_over_http(
        "the HTTP probe", lambda port: ((*argv, str(port)), {}), tmp_path / "probe.log"
    ) as url:
        config = tmp_path / "tools.yaml"
        config.write_text(
            f"servers:\n  {MOUNT}:\n    url: {json.dumps(url)}\n    namespace: {NS}\n",
            encoding="utf-8",
        )
        direct_http = Endpoint("direct http", url=url)
        errlog = tmp_path / "launcher.log"
        if request.param == "stdio":
            mounted = stdio_endpoint(
                "mounted stdio", launcher_argv(config), namespace=NS, mount=MOUNT, errlog=errlog
            )
            yield direct_http, mounted
            return
        with http_launcher(config, errlog=errlog) as launched:
            yield direct_http, Endpoint("mounted http", url=launched.url, namespace=NS, mount=MOUNT)


async def test_a_url_servers_custom_notifications_reach_the_client(
    url_pair: tuple[Endpoint, Endpoint],
) -> None:
    """``notifications/probe/custom`` and ``notifications/tasks/status`` of a ``url:`` server,
    which the SDK's client session would drop, reach the client as from a command server."""

    async def scenario(run: Run) -> None:
        async with run.client("client", SPEC) as client:
            await client.call("custom")

    await assert_same(scenario, *url_pair, View(parts=("exchanges", "notifications")))


# --- row 7: JSON-RPC edges of the launcher's own stdio -------------------------------------------
# (the reference servers are no yardstick here: server-everything answers a call before
# initialize, and drops a malformed line or a boolean progress token without a word)


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[RawStdio]:
    """A launcher mounting the probe, spoken to in raw lines over stdio."""
    config = probe_config(tmp_path / "tools.yaml")
    with (tmp_path / "launcher.log").open("w") as errlog:
        launcher = RawStdio(list(launcher_argv(config)), config.parent, stderr=errlog.fileno())
        try:
            yield launcher
        finally:
            _stop(launcher)


def _stop(launcher: RawStdio) -> None:
    launcher.proc.kill()
    launcher.proc.wait()
    for pipe in (launcher.proc.stdin, launcher.proc.stdout):
        if pipe is not None:
            pipe.close()


def _reply(launcher: RawStdio) -> dict:
    line = launcher.line()
    assert line is not None, "no reply"
    return json.loads(line)


@pytest.mark.slow
def test_a_call_before_initialize_is_told_to_initialize(raw: RawStdio) -> None:
    raw.send(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}')
    reply = _reply(raw)
    assert reply["id"] == 1 and "error" in reply, reply
    assert "initializ" in reply["error"]["message"], reply


@pytest.mark.slow
def test_a_boolean_progress_token_is_refused(raw: RawStdio) -> None:
    raw.send(INITIALIZE)
    _reply(raw)
    raw.send(INITIALIZED)
    raw.send(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": f"{NS}_seen", "arguments": {}, "_meta": {"progressToken": True}},
            }
        ).encode()
    )
    reply = _reply(raw)
    assert reply.get("error", {}).get("code") == -32602, reply


@pytest.mark.slow
def test_a_parse_error_has_a_null_id(raw: RawStdio) -> None:
    """JSON-RPC 2.0: the reply to a line that is not JSON carries ``id: null``, even when the
    id could be guessed (it holds today; the docs say otherwise, below)."""
    raw.send(b'{"jsonrpc":"2.0","id":7,"method":"tools/list",')
    reply = _reply(raw)
    assert reply["id"] is None and reply["error"]["code"] == -32700, reply


def test_the_docs_say_a_parse_error_has_a_null_id() -> None:
    promise = "each with the request's `id` when it can be read"
    promising = [str(page) for page in DOCS.rglob("*.md") if promise in page.read_text()]
    assert not promising, f"{promising} promise the id on every malformed line's reply"


# --- row 8: an overlong line's memory -------------------------------------------------------------

LIMIT = 32 << 20


@pytest.mark.slow
def test_an_overlong_line_costs_at_most_about_max_line_bytes(tmp_path: Path) -> None:
    config = probe_config(
        tmp_path / "tools.yaml",
        f"max_line_bytes: {LIMIT}\nenv: {{PROBE_OVERLONG_BYTES: '200000000'}}\ntimeout: 120",
    )
    with (tmp_path / "launcher.log").open("w") as errlog:
        launcher = RawStdio(list(launcher_argv(config)), tmp_path, stderr=errlog.fileno())
    try:
        launcher.send(INITIALIZE)
        _reply(launcher)
        launcher.send(INITIALIZED)
        launcher.send(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}')
        _reply(launcher)
        status = Path(f"/proc/{launcher.proc.pid}/status")
        Path(f"/proc/{launcher.proc.pid}/clear_refs").write_text("5")  # peak RSS := RSS now
        before = _kib(status, "VmHWM")
        launcher.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": f"{NS}_overlong"},
                }
            ).encode()
        )
        reply = _reply(launcher)
        assert reply["result"]["isError"], reply
        grown = (_kib(status, "VmHWM") - before) * 1024
    finally:
        _stop(launcher)
    assert grown <= 1.5 * LIMIT, (
        f"peak RSS grew {grown >> 20} MiB for max_line_bytes {LIMIT >> 20} MiB"
    )


def _kib(status: Path, key: str) -> int:
    for line in status.read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in {status}")
