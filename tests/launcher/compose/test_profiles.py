"""Profiles (docs/clients.md): 150+ tools under a 40-tool profile, over stdio and HTTP.

One launcher per transport: a config mounting ``sample_servers:make_counter`` (its ``bump``
runs under the process lock) and ``many_tools_server.py`` (150 tools, one left out by a
server filter), served under a profile of at most 40 tools and 40-character names.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from doc_processing_std_tools.launcher.compose.profile_names import (
    NameMap,
    exposed_name,
    short_description,
)
from doc_processing_std_tools.launcher.compose.profiles import (
    BUILTIN,
    CALL_TOOL,
    SEARCH_TOOL,
    Profile,
    ProfileError,
    resolve,
)
from doc_processing_std_tools.launcher.config.schema import BUILTIN_PROFILE_NAMES, LauncherConfig
from helpers.paths import SERVERS, python_path
from helpers.waiting import until

NAMESPACE = "github-enterprise-cloud"
HIDDEN = f"{NAMESPACE}_export_dependabot_alert"  # 47 characters: shortened under the profile
DELETED = f"{NAMESPACE}_delete_gist"  # left out by the profile's exclude
FILTERED = f"{NAMESPACE}_secret_wipe_everything"  # left out by the server's own filter
EXTERNAL = f"command: {sys.executable}\n    args: [{SERVERS / 'many_tools_server.py'}]"
IN_PROCESS = "module: helpers.servers.many_tools_server:server"
CONFIG = f"""\
servers:
  counter:
    module: helpers.servers.sample_servers:make_counter
    namespace: counter
  many:
    {{many}}
    namespace: {NAMESPACE}
    tools:
      exclude: ["secret_*"]
profiles:
  small:
    max_tools: 40
    max_name_length: 40
    pin: [counter_active, counter_peek]
    exclude: ["*_delete_*"]
    descriptions: short
"""


def text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def shown_as(name: str) -> str:
    return exposed_name(name, resolve(LauncherConfig.model_validate(_config()), "small"))


def _config() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(CONFIG.format(many=IN_PROCESS))


# -- names, without a launcher -----------------------------------------------------------


def test_the_config_knows_the_built_in_profiles_by_name() -> None:
    """The config's check of access: rules names them without importing compose/."""
    assert tuple(BUILTIN) == BUILTIN_PROFILE_NAMES


def test_long_names_are_shortened_readably_the_same_way_every_time() -> None:
    profile = resolve(LauncherConfig.model_validate(_config()), "small")
    short = exposed_name(HIDDEN, profile)
    assert short == exposed_name(HIDDEN, profile)  # deterministic (hashlib, not hash())
    assert len(short) <= 40 and short.startswith("gi") and "export_dependabot" in short
    assert exposed_name("counter_bump", profile) == "counter_bump"  # fits: unchanged
    others = {exposed_name(f"{NAMESPACE}_export_dependabot_alert{n}", profile) for n in range(50)}
    assert len(others) == 50  # names sharing their first 40 characters stay apart


def test_characters_clients_refuse_are_mapped_only_when_the_profile_says_so() -> None:
    config = LauncherConfig.model_validate(
        {"servers": {"m": {}}, "profiles": {"p": {"map_chars": True}, "q": {}}}
    )
    assert exposed_name("fs.read/file", resolve(config, "p")) == "fs_read_file"
    assert exposed_name("fs.read/file", resolve(config, "q")) == "fs.read/file"


def test_a_config_profile_overrides_the_built_in_fields_it_names() -> None:
    config = LauncherConfig.model_validate(
        {"servers": {"m": {}}, "profiles": {"cursor": {"max_tools": 20}}}
    )
    cursor = resolve(config, "cursor")
    assert (cursor.max_tools, cursor.max_name_length, cursor.search) == (20, 60, "auto")
    assert cursor.name_budget == 60 - len("dpt")  # Cursor counts server name + tool name
    with pytest.raises(ProfileError, match="no profile 'nope'; known: claude-code"):
        resolve(config, "nope")


def test_a_name_the_profile_cannot_show_refuses_the_profile_with_the_fix() -> None:
    config = LauncherConfig.model_validate(
        {"servers": {"m": {}}, "profiles": {"p": {"search": "always"}, "q": {"max_tools": 2}}}
    )
    clash = NameMap.build(resolve(config, "p"), ["a_one", SEARCH_TOOL])
    assert "exclude: [search_tools]" in clash.problems()[0]
    over = NameMap.build(Profile(name="q", max_tools=2, search="off"), ["a", "b", "c"])
    assert "set profiles.q.search: auto" in over.problems()[0]


def test_the_list_follows_the_compositions_names_as_they_change() -> None:
    """A server's ``list_changed`` moves the composition's names; the profile follows them."""
    from types import SimpleNamespace

    from doc_processing_std_tools.launcher.compose.profile_gate import ProfileGate

    def mounts(*names: str) -> list[Any]:
        return [SimpleNamespace(tools=[SimpleNamespace(name=n) for n in names])]

    composition = SimpleNamespace(mounts=mounts("a_one", "a_two"))
    gate = ProfileGate(composition, {"p": Profile(name="p", max_tools=2, pin=("a_one",))}, "p")
    assert gate.names("p").listed() == ["a_one", "a_two"]
    composition.mounts = mounts("a_one", "a_two", "a_three")
    assert gate.names("p").searching() and gate.names("p").listed() == ["a_one"]


def test_short_descriptions_keep_the_first_sentence() -> None:
    assert short_description("Read a file. Then more.\n\nDetails.") == "Read a file."
    assert short_description("One paragraph\nwrapped\n\nSecond.") == "One paragraph wrapped"


# -- served --------------------------------------------------------------------------------


async def _check_profile_session(session: Any) -> None:
    """The 40-tool profile as one client sees it; shared by the stdio and HTTP tests."""
    listed = {t.name: t for t in (await session.list_tools()).tools}
    assert len(listed) <= 40
    assert all(len(name) <= 40 for name in listed)
    assert {"counter_active", "counter_peek", SEARCH_TOOL, CALL_TOOL} <= set(listed)
    assert "counter_bump" not in listed and shown_as(HIDDEN) not in listed

    found = await session.call_tool(SEARCH_TOOL, {"query": "export dependabot alerts as csv"})
    tools = found.structured_content["tools"]
    assert tools[0]["name"] == shown_as(HIDDEN)
    assert tools[0]["inputSchema"]["required"] == ["owner", "repo"]  # its full definition
    deleted = await session.call_tool(SEARCH_TOOL, {"query": "delete gist", "limit": 50})
    assert shown_as(DELETED) not in {t["name"] for t in deleted.structured_content["tools"]}

    via = await session.call_tool(
        CALL_TOOL, {"name": shown_as(HIDDEN), "arguments": {"owner": "o", "repo": "r"}}
    )
    assert not via.is_error and json.loads(text(via))["tool"] == "export_dependabot_alert"
    direct = await session.call_tool(shown_as(HIDDEN), {"owner": "o", "repo": "r"})
    assert direct.content == via.content  # the same path, the same result

    # Left out by the profile or by the server's filter: as unknown as a name nobody has.
    unknown = await session.call_tool("no_such_tool", {})
    assert unknown.is_error and "no_such_tool" in text(unknown)
    for name in (DELETED, FILTERED, shown_as(DELETED)):
        for result in (
            await session.call_tool(name, {"owner": "o", "repo": "r"}),
            await session.call_tool(CALL_TOOL, {"name": name, "arguments": {}}),
        ):
            assert result.is_error
            assert text(result) == text(unknown).replace("no_such_tool", name)


async def _overlap_of_bumps(first: Any, second: Any) -> list[int]:
    """Two ``bump`` calls at once, *first* through ``call_tool``, *second* direct: each returns
    the most bumps it saw running at once (1 under the process lock). The second is sent once
    the first runs (``counter_active``, read-only, answers while it does), and the first runs
    long enough that, were the lock not held, the second would run beside it."""
    seen: list[int] = []

    async def bump(session: Any, through_call_tool: bool) -> None:
        if through_call_tool:
            result = await session.call_tool(
                CALL_TOOL, {"name": "counter_bump", "arguments": {"delay": 1.0}}
            )
        else:
            result = await session.call_tool("counter_bump", {"delay": 0.05})
        assert not result.is_error, text(result)
        seen.append(int(text(result)))

    async def running() -> bool:
        return text(await first.call_tool("counter_active", {})) == "1"

    async with anyio.create_task_group() as group:
        group.start_soon(bump, first, True)
        await until(running, "the first bump to run")
        group.start_soon(bump, second, False)
    return seen


@pytest.mark.slow
async def test_a_40_tool_profile_over_stdio(write_config) -> None:
    """The big server is a ``command:``: over stdio its calls take the fast path, which must
    know the profile's names too (a left-out tool called by its own name stays unknown)."""
    from helpers.launch import launched

    config = write_config(CONFIG.format(many=EXTERNAL))
    env = {"PYTHONPATH": python_path()}
    async with launched(config, env=env, args=("--profile", "small")) as session:
        await _check_profile_session(session)
        # The lock holds for a hidden tool called through call_tool (a second stdio client
        # would be a second process; the HTTP test shares one between profiles).
        assert await _overlap_of_bumps(session, session) == [1, 1]


@pytest.mark.slow
async def test_profiles_served_by_path_from_one_http_process_share_the_lock(write_config) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from helpers.launch import http_launcher

    config = write_config(CONFIG.format(many=IN_PROCESS))
    with http_launcher(config) as served:
        base = served.url.rstrip("/")
        async with (
            streamable_http_client(f"{base}/small") as (read, write, *_),
            ClientSession(read, write) as small,
            streamable_http_client(f"{base}/cursor") as (read2, write2, *_),
            ClientSession(read2, write2) as cursor,
            streamable_http_client(base) as (read3, write3, *_),
            ClientSession(read3, write3) as everything,
        ):
            for session in (small, cursor, everything):
                await session.initialize()
            await _check_profile_session(small)
            all_tools = (await everything.list_tools()).tools
            assert len(all_tools) == 153  # 150 + counter's 3: no profile on the plain path
            cursor_tools = (await cursor.list_tools()).tools
            assert len(cursor_tools) <= 40 and {SEARCH_TOOL, CALL_TOOL} <= {
                t.name for t in cursor_tools
            }
            assert all(len(t.name) <= 60 - len("dpt") for t in cursor_tools)
            assert await _overlap_of_bumps(small, cursor) == [1, 1]


# -- the verbs -----------------------------------------------------------------------------


def _run(*args: str, cwd: Path) -> Any:
    import subprocess

    from helpers.launch import launcher_command

    pythonpath = python_path()
    return subprocess.run(
        [*launcher_command(), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": pythonpath},
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


async def _verb(capsys: Any, verb: str, *argv: str) -> tuple[int, str]:
    """``dpt-launch VERB ARGV`` run in this process (no launcher to start): status, stdout
    (stderr is kept in ``_verb.err``)."""
    from doc_processing_std_tools.launcher.cli import client_config, tool_verbs

    if verb == "client-config":
        status = client_config.client_config(client_config.parse(list(argv), "tools.yaml"))
    else:
        status = await tool_verbs.tools(tool_verbs.parse(verb, list(argv), "tools.yaml"))
    captured = capsys.readouterr()
    _verb.err = captured.err  # type: ignore[attr-defined]
    return status, captured.out


async def test_the_budget_names_the_limits_a_profile_meets_and_what_it_does(
    write_config, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # (the tables fit the terminal: a wide one, whole names)
    config = write_config(CONFIG.format(many=IN_PROCESS))
    status, out = await _verb(
        capsys, "tools", "--config", str(config), "--budget", "small", "--json"
    )
    assert status == 0
    report = json.loads(out)
    tokens = [row["tokens"] for row in report["tools"]]
    assert report["total"] == {"tools": 153, "tokens": sum(tokens)} and min(tokens) > 0
    assert report["servers"]["many"]["tools"] == 150
    profile = report["profile"]
    assert profile["exceeded"][0] == "max_tools 40: 153 tools"
    assert "max_name_length 40" in profile["exceeded"][1]
    assert any(line.startswith("search mode: lists 2 pinned tools") for line in profile["does"])
    assert profile["shown"]["tools"] == 4 and profile["shown"]["tokens"] < sum(tokens) / 10
    hidden = next(row for row in report["tools"] if row["name"] == HIDDEN)
    assert hidden["shown_as"] == shown_as(HIDDEN) and not hidden["listed"]

    status, table = await _verb(capsys, "tools", "--config", str(config))
    assert status == 0 and "server's name" in table and "export_dependabot_al" in table


async def test_client_config_runs_the_client_with_its_profile(write_config, capsys) -> None:
    config = str(write_config(CONFIG.format(many=IN_PROCESS)))
    _, shown = await _verb(capsys, "client-config", "windsurf", "--config", config)
    assert json.loads(shown)["mcpServers"]["dpt"]["args"][-2:] == ["--profile", "windsurf"]
    _, plain = await _verb(
        capsys, "client-config", "cursor", "--config", config, "--profile", "none"
    )
    assert "--profile" not in plain
    url = "http://127.0.0.1:8765/mcp"
    _, bridged = await _verb(capsys, "client-config", "codex", "--url", url)
    assert f'args = ["connect", "{url}", "--profile", "codex"]' in bridged
    status, _ = await _verb(capsys, "client-config", "cursor", "--config", config, "--profile", "x")
    assert status == 2 and "no profile 'x'" in _verb.err  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_profile_that_cannot_be_served_refuses_the_launch_with_the_fix(write_config) -> None:
    config = write_config(
        "servers:\n  counter:\n    module: helpers.servers.sample_servers:make_counter\n"
        "profiles:\n  strict:\n    max_tools: 2\n    search: off\n"
    )
    why = "profiles.strict: 3 tools, over its max_tools (2), and search is off; set "
    done = _run("--config", str(config), "--profile", "strict", cwd=config.parent)
    assert done.returncode == 2 and why in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    check = _run("--config", str(config), "--check", cwd=config.parent)
    assert check.returncode == 1 and f"FAIL {why}" in " ".join(check.stdout.split())


def test_connect_carries_the_profile_as_the_paths_last_segment() -> None:
    from doc_processing_std_tools.launcher.cli.connect import profile_url

    assert profile_url("http://h:1/mcp", "cursor") == "http://h:1/mcp/cursor"
    assert profile_url("http://h:1/mcp/?x=1", "cursor") == "http://h:1/mcp/cursor?x=1"
    assert profile_url("http://h:1/mcp", None) == "http://h:1/mcp"


async def test_a_call_through_call_tool_times_out_as_a_direct_call_does(write_config) -> None:
    """In-process (the SDK server's middleware runs for an in-memory client too)."""
    from fastmcp import Client

    from doc_processing_std_tools.launcher.compose.composition import compose
    from doc_processing_std_tools.launcher.compose.profile_gate import install_profiles
    from doc_processing_std_tools.launcher.config.schema import load_config

    config = write_config(
        "servers:\n  counter:\n    module: helpers.servers.sample_servers:make_counter\n    timeout: 0.2\n"
        "profiles:\n  p:\n    search: always\n"
    )
    composition = await compose(load_config(config))
    try:
        install_profiles(composition, [], "p")
        async with Client(composition.root) as client:
            listed = {t.name for t in await client.list_tools()}
            assert listed == {SEARCH_TOOL, CALL_TOOL}
            via = await client.call_tool(
                CALL_TOOL, {"name": "bump", "arguments": {"delay": 0.6}}, raise_on_error=False
            )
            direct = await client.call_tool("bump", {"delay": 0.6}, raise_on_error=False)
            # The profile's own answers carry the 2026-era envelope this client checks.
            found = await client.call_tool(SEARCH_TOOL, {"query": "bump"})
            assert found.structured_content["tools"][0]["name"] == "bump"
            bad = await client.call_tool(CALL_TOOL, {"arguments": {}}, raise_on_error=False)
            assert bad.is_error and "call_tool needs 'name'" in text(bad)
        assert via.is_error and "0.2" in text(via) and text(via) == text(direct)
    finally:
        await composition.aclose()
