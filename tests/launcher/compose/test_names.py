"""Names every client accepts (docs/clients.md, *Names*): the composition takes what the MCP spec
allows; a client naming no profile sees names every client takes; a profile shows its own rule.

``odd_names_server.py`` (a ``command:`` server) exposes ``get.issue``, a 100-character name and
``list_issues``; with ``--collide`` also ``get_issue``, which ``get.issue`` maps onto.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

from doc_processing_std_tools.launcher.compose.exposure import TOOL_NAME
from doc_processing_std_tools.launcher.compose.profile_names import (
    NameMap,
    exposed_name,
    plain_names,
)
from doc_processing_std_tools.launcher.compose.profiles import (
    BUILTIN,
    CLIENT_NAME,
    PLAIN_RULE,
    Profile,
    resolve,
)
from doc_processing_std_tools.launcher.config.schema import LauncherConfig
from helpers.paths import SERVERS
from helpers.servers.odd_names_server import LONG

SHORT = exposed_name(LONG, PLAIN_RULE)
CONFIG = f"""\
servers:
  odd:
    command: {sys.executable}
    args: [{SERVERS / "odd_names_server.py"}{{collide}}]
profiles:
  keep:
    map_chars: false
"""


def text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def test_the_composition_takes_what_the_mcp_spec_allows_and_no_more() -> None:
    for name in ("get.issue", "a" * 128, "DATA_EXPORT_v2", "admin.tools.list"):
        assert TOOL_NAME.match(name)
    for name in ("a" * 129, "", "user-profile/update", "with space", "caf\u00e9"):
        assert not TOOL_NAME.match(name)


def test_the_plain_rule_changes_only_names_clients_refuse() -> None:
    assert plain_names(["write_memory", "a" * 64, "x-y"]) is None  # nothing to do, no table
    names = plain_names(["get.issue", LONG, "list_issues"])
    assert names is not None and names.shown["list_issues"] == "list_issues"
    assert names.shown["get.issue"] == "get_issue"
    assert names.shown[LONG] == SHORT and len(SHORT) <= 64 and SHORT.startswith("su")
    assert all(CLIENT_NAME.match(shown) for shown in names.shown.values())


def test_an_unchanged_name_keeps_it_whatever_the_order() -> None:
    names = NameMap.build(PLAIN_RULE, ["get.issue", "get_issue"])
    assert names.shown == {"get_issue": "get_issue"}
    assert names.collisions == (("get_issue", "get.issue", "get_issue"),)


def test_every_built_in_profile_shows_names_its_client_takes() -> None:
    config = LauncherConfig.model_validate({"servers": {"m": {}}})
    for client in BUILTIN:
        profile = resolve(config, client)
        for name in ("get.issue", LONG):
            shown = exposed_name(name, profile)
            assert CLIENT_NAME.match(shown) and len(shown) <= (profile.name_budget or 64), client


def test_a_profile_without_map_chars_shows_a_dotted_name_as_it_is() -> None:
    """The MCP spec allows the dot: a profile that does not ask for mapping keeps it."""
    keep = Profile(name="keep", map_chars=False)
    assert exposed_name("get.issue", keep) == "get.issue"
    assert exposed_name("get.issue", Profile(name="vs", map_chars=True)) == "get_issue"


@pytest.mark.slow
async def test_a_client_naming_no_profile_sees_and_calls_names_every_client_takes(
    write_config,
) -> None:
    """Over stdio (the external server's calls take the fast path, which knows the names); then
    a reload adding a server whose tools would share a shown name is refused, with the fix."""
    import signal

    import anyio

    from helpers.launch import launched
    from helpers.processes import launcher_pid

    config = write_config(CONFIG.format(collide=""))
    errlog = config.parent / "stderr.log"
    async with launched(config, errlog=errlog) as session:
        listed = [t.name for t in (await session.list_tools()).tools]
        assert sorted(listed) == sorted(["get_issue", SHORT, "list_issues"])
        assert all(CLIENT_NAME.match(name) for name in listed)
        for shown, own in (("get_issue", "get.issue"), (SHORT, LONG), ("list_issues",) * 2):
            result = await session.call_tool(shown, {"number": 7})
            assert not result.is_error, text(result)
            assert result.structured_content == {"tool": own, "number": 7}
        # The server's own name is not one the client was shown: unknown, as any other.
        unknown = await session.call_tool("get.issue", {})
        assert unknown.is_error and "get.issue" in text(unknown)

        two = f"  two:\n    command: {sys.executable}\n    namespace: two\n"
        two += f"    args: [{SERVERS / 'odd_names_server.py'}, --collide]\n"
        config.write_text(config.read_text().replace("profiles:", two + "profiles:"))
        os.kill(launcher_pid(config), signal.SIGHUP)
        with anyio.fail_after(30):
            while "reload refused" not in errlog.read_text():
                await anyio.sleep(0.1)
        refused = next(line for line in errlog.read_text().splitlines() if "reload" in line)
        assert "'two_get.issue' of 'two' would be shown to clients as 'two_get_issue'" in refused
        assert "servers.two.tools.exclude: [get.issue]" in refused
        assert sorted(t.name for t in (await session.list_tools()).tools) == sorted(listed)


@pytest.mark.slow
async def test_a_profile_shows_its_own_rule_and_the_plain_path_the_default_one(
    write_config,
) -> None:
    """One HTTP process: ``/mcp/keep`` (``map_chars: false``, no length limit) shows the
    server's names as they are; ``/mcp`` shows names every client takes."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from helpers.launch import http_launcher

    config = write_config(CONFIG.format(collide=""))
    with http_launcher(config) as served:
        base = served.url.rstrip("/")
        async with (
            streamable_http_client(f"{base}/keep") as (read, write, *_),
            ClientSession(read, write) as keep,
            streamable_http_client(base) as (read2, write2, *_),
            ClientSession(read2, write2) as plain,
        ):
            await keep.initialize()
            await plain.initialize()
            kept = sorted(t.name for t in (await keep.list_tools()).tools)
            assert kept == sorted(["get.issue", LONG, "list_issues"])
            result = await keep.call_tool("get.issue", {"number": 2})
            assert result.structured_content == {"tool": "get.issue", "number": 2}
            shown = sorted(t.name for t in (await plain.list_tools()).tools)
            assert shown == sorted(["get_issue", SHORT, "list_issues"])
            result = await plain.call_tool(SHORT, {})
            assert result.structured_content == {"tool": LONG, "number": 1}


@pytest.mark.slow
async def test_names_a_server_adds_while_serving_are_shown_as_every_client_takes(
    write_config,
) -> None:
    """At launch every name fits (nothing installed); the server then adds ``get.issue`` and a
    100-character name: the default rule comes in, for the list and the stdio fast path."""
    from helpers.launch import launched
    from helpers.notices import CHANGED, Notices

    config = write_config(CONFIG.format(collide=", --later"))
    notices = Notices()
    async with launched(config, message_handler=notices) as session:
        assert {t.name for t in (await session.list_tools()).tools} == {"grow", "list_issues"}
        assert text(await session.call_tool("grow", {})) == "grown"
        await notices.wait_for(CHANGED)
        listed = {t.name for t in (await session.list_tools()).tools}
        assert listed == {"grow", "list_issues", "get_issue", SHORT}
        for shown, own in (("get_issue", "get.issue"), (SHORT, LONG)):
            result = await session.call_tool(shown, {"number": 3})
            assert result.structured_content == {"tool": own, "number": 3}, text(result)


@pytest.mark.slow
def test_a_name_shared_after_mapping_refuses_the_launch_with_the_fix(write_config, capsys) -> None:
    """The launch (a real process) exits 2 with the fix; ``--check`` (run in-process: the same
    composition) says FAIL with the reason."""
    import subprocess

    from doc_processing_std_tools.launcher.cli.main import main
    from helpers.launch import launcher_command

    config = write_config(CONFIG.format(collide=", --collide"))
    why = "tool 'get.issue' of 'odd' would be shown to clients as 'get_issue'"
    fix = "servers.odd.tools.exclude: [get.issue]"
    done = subprocess.run(
        [*launcher_command(), "--config", str(config)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert why in done.stderr and fix in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    capsys.readouterr()
    assert main(["--config", str(config), "--check"]) == 1
    assert f"FAIL {why}" in " ".join(capsys.readouterr().out.split())


async def test_the_verbs_show_and_call_the_shown_name(write_config, capsys) -> None:
    from doc_processing_std_tools.launcher.cli import tool_verbs as verbs

    config = str(write_config(CONFIG.format(collide="")))
    assert await verbs.tools(verbs.parse("tools", ["--config", config, "--json"], "x")) == 0
    rows = {row["name"]: row["own_name"] for row in json.loads(capsys.readouterr().out)}
    assert rows == {"get_issue": "get.issue", SHORT: LONG, "list_issues": "list_issues"}
    args = verbs.parse("call", ["--config", config, "get_issue", '{"number": 5}'], "x")
    assert await verbs.call(args) == 0
    assert json.loads(capsys.readouterr().out) == {"tool": "get.issue", "number": 5}


async def test_nothing_is_installed_when_every_name_is_fine(write_config) -> None:
    """Today's configs: no gate, no name table, the call path exactly as before."""
    from doc_processing_std_tools.launcher.compose.composition import compose
    from doc_processing_std_tools.launcher.compose.profile_gate import gate_of, install_profiles
    from doc_processing_std_tools.launcher.config.schema import load_config

    config = write_config(
        "servers:\n  counter:\n    module: helpers.servers.sample_servers:make_counter\n"
    )
    composition = await compose(load_config(config))
    try:
        assert install_profiles(composition, [], None) is None
        assert gate_of(composition.root) is None
    finally:
        await composition.aclose()
