"""Per-user access end to end (issue 36 §2): two users signed in at once with JWTs from a local
identity provider each list, search and call exactly what ``access:`` allows them, at the plain
endpoint and at profiles' endpoints (also with a session opened at another endpoint); a
denied profile answers 403 in one line. Over stdio the caller is the local user: only the
rules that name no one apply, even one naming that user.
"""

from __future__ import annotations

import getpass
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.idp import AUDIENCE, KeyServer, bearer, rsa_key, signed
from helpers.launch import Launched, http_launcher, launched, text_of, tool_names
from helpers.paths import SERVERS as SERVERS_DIR
from helpers.paths import python_path
from helpers.rpc import open_session, rpc

pytest.importorskip("joserfc")

PLAIN = "helpers.servers.policy_plain_server:create"
RELAYED = SERVERS_DIR / "policy_server.py"  # a command: server: its calls are relayed
SERVERS = f"""\
    servers:
      a: {{module: '{PLAIN}', namespace: a}}
      b: {{module: '{PLAIN}', namespace: b}}
      c: {{command: '{sys.executable}', args: ['{RELAYED}'], namespace: c}}
      who: {{module: 'helpers.servers.identity_server:whoami_server'}}
    profiles:
      ops: {{search: always}}
      finder: {{search: always}}
"""
# everyone: the "ready" tools, no profile; alice: all of a and c, whoami, the finder profile;
# the ops group: b but its secret, whoami, both profiles
ACCESS = """\
    access:
      - {tools: '*_ready', profiles: []}
      - {users: alice, servers: [a, c, who], profiles: finder}
      - {claims: {groups: ops}, servers: [b, who], exclude: b_secret, profiles: [ops, finder]}
"""
CONFIG = """\
    transport:
      type: http
      auth:
        jwt:
          jwks_uri: {jwks_uri}
          issuer: {issuer}
          audience: {audience}
          jwks_refresh_interval: 0
"""
OWN = {"slow", "change", "hold", "ready", "secret"}  # a's and b's tools
RELAYED_OWN = {"slow", "change", "crash", "die", "ready", "secret"}  # c's
ALICE_SEES = {f"a_{t}" for t in OWN} | {f"c_{t}" for t in RELAYED_OWN} | {"b_ready", "whoami"}
BOB_SEES = {f"b_{t}" for t in OWN - {"secret"}} | {"a_ready", "c_ready", "whoami"}
DENIED = "access denied: {user!r} may not call {tool!r} (no rule of access: allows it)"


class Users:
    """The two signed-in users' headers, and the daemon serving them."""

    daemon: Launched
    alice: dict[str, str]
    bob: dict[str, str]


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Users]:
    keys = KeyServer()
    key = rsa_key("k")
    keys.publish(key)
    folder = tmp_path_factory.mktemp("access")
    config = folder / "tools.yaml"
    text = CONFIG.format(jwks_uri=keys.jwks_uri, issuer=keys.issuer, audience=AUDIENCE)
    config.write_text(textwrap.dedent(text + SERVERS + ACCESS))
    found = Users()
    found.alice = bearer(signed(key, keys.issuer, sub="alice", groups=["staff"]))
    found.bob = bearer(signed(key, keys.issuer, sub="bob", groups=["ops", "staff"]))
    try:
        with http_launcher(config) as daemon:
            found.daemon = daemon
            yield found
    finally:
        keys.close()


def listed(port: int, headers: dict[str, str], session: str, path: str = "/mcp") -> set[str]:
    reply = rpc(port, "tools/list", {}, session=session, headers=headers, path=path)
    assert reply.status == 200, reply
    return {tool["name"] for tool in reply.message()["result"]["tools"]}


def call(
    port: int,
    headers: dict[str, str],
    session: str,
    tool: str,
    path: str = "/mcp",
    **arguments: Any,
) -> tuple[bool, str]:
    params = {"name": tool, "arguments": arguments}
    reply = rpc(port, "tools/call", params, session=session, headers=headers, path=path)
    assert reply.status == 200, reply
    result = reply.message()["result"]
    return result["isError"], "".join(block.get("text", "") for block in result["content"])


def searched(port: int, headers: dict[str, str], session: str, path: str) -> set[str]:
    failed, text = call(port, headers, session, "search_tools", path, query="tool", limit=50)
    assert not failed, text
    return {tool["name"] for tool in json.loads(text)}


def described(names: set[str]) -> set[str]:
    """The tools of *names* the search's query finds: a's and b's (described as test tools)."""
    return {name for name in names if name.startswith(("a_", "b_"))}


def test_two_users_at_once_list_and_call_what_the_rules_allow(users: Users) -> None:
    port = users.daemon.port
    alice = open_session(port, headers=users.alice)
    bob = open_session(port, headers=users.bob)
    assert listed(port, users.alice, alice) == ALICE_SEES
    assert listed(port, users.bob, bob) == BOB_SEES
    assert call(port, users.alice, alice, "c_change") == (False, "change")  # (relayed)
    assert call(port, users.bob, bob, "c_change") == (
        True,
        DENIED.format(user="bob", tool="c_change"),
    )
    assert call(port, users.alice, alice, "a_change") == (False, "changed")
    assert call(port, users.bob, bob, "b_change") == (False, "changed")
    assert call(port, users.alice, alice, "whoami") == (False, "alice")
    assert call(port, users.bob, bob, "whoami") == (False, "bob")
    assert call(port, users.alice, alice, "b_ready") == (False, "ready")
    assert call(port, users.alice, alice, "b_change") == (
        True,
        DENIED.format(user="alice", tool="b_change"),
    )
    assert call(port, users.bob, bob, "b_secret") == (
        True,
        DENIED.format(user="bob", tool="b_secret"),
    )
    assert call(port, users.bob, bob, "a_secret") == (
        True,
        DENIED.format(user="bob", tool="a_secret"),
    )
    log = users.daemon.stderr()
    assert "WARNING" in log and "access denied: 'bob' may not call 'a_secret'" in log


def test_profiles_search_and_a_session_used_at_another_endpoint(users: Users) -> None:
    port = users.daemon.port
    # alice may not use the ops profile: 403, one line, also with her session of /mcp
    alice = open_session(port, headers=users.alice)
    for session in (None, alice):
        refused = rpc(port, "tools/list", {}, session=session, headers=users.alice, path="/mcp/ops")
        assert refused.status == 403, refused
        assert refused.body.decode() == "access denied: 'alice' may not use profile 'ops' " + (
            "(no rule of access: allows it)"
        )
    # her session of /mcp is not one of /mcp/finder's (a session belongs to its endpoint) ...
    elsewhere = rpc(port, "tools/list", {}, session=alice, headers=users.alice, path="/mcp/finder")
    assert elsewhere.status == 404 and b"opened at the plain endpoint" in elsewhere.body
    # ... her session of /mcp/finder: search and call_tool see only her tools
    finder = open_session(port, headers=users.alice, path="/mcp/finder")
    assert searched(port, users.alice, finder, "/mcp/finder") == described(ALICE_SEES)
    assert call(port, users.alice, finder, "call_tool", "/mcp/finder", name="a_change") == (
        False,
        "changed",
    )
    failed, text = call(port, users.alice, finder, "call_tool", "/mcp/finder", name="b_secret")
    assert (failed, text) == (True, DENIED.format(user="alice", tool="b_secret"))
    # bob's session of /mcp/ops serves him there, and nowhere else
    bob = open_session(port, headers=users.bob, path="/mcp/ops")
    assert searched(port, users.bob, bob, "/mcp/ops") == described(BOB_SEES)
    failed, text = call(port, users.bob, bob, "call_tool", "/mcp/ops", name="b_secret")
    assert (failed, text) == (True, DENIED.format(user="bob", tool="b_secret"))
    for path in ("/mcp/finder", "/mcp"):
        moved = rpc(port, "tools/list", {}, session=bob, headers=users.bob, path=path)
        assert moved.status == 404 and b"opened at the 'ops' profile's endpoint" in moved.body
    assert listed(port, users.bob, open_session(port, headers=users.bob)) == BOB_SEES


async def test_over_stdio_only_rules_naming_no_one_apply_to_the_local_user(
    tmp_path: Path,
) -> None:
    config = tmp_path / "tools.yaml"
    local = getpass.getuser()
    config.write_text(
        textwrap.dedent(SERVERS)
        + "access:\n  - {tools: 'a_*', exclude: a_secret}\n"
        + f"  - {{users: ['{local}', '*'], tools: '*'}}\n"
    )
    async with launched(config, env={"PYTHONPATH": python_path()}) as session:
        assert await tool_names(session) == {f"a_{t}" for t in OWN - {"secret"}}
        assert text_of(await session.call_tool("a_change", {})) == "changed"
        denied = await session.call_tool("b_change", {})
        assert denied.is_error and text_of(denied) == DENIED.format(user=local, tool="b_change")
