"""Per-user access end to end (issue 36 §2): two users signed in at once with JWTs from a local
identity provider each list, search and call exactly what ``access:`` allows them, at the plain
endpoint and at profiles' endpoints (also with a session opened at another endpoint); a
denied profile answers 403 in one line; a server's prompts, resources and templates are
listed, got, read and subscribed to only by the callers a rule allows the whole server (to
the others, as unknown ones). Over stdio the caller is the local user: only the rules that
name no one apply, even one naming that user.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from doc_processing_std_tools.launcher.calls.access import Access
from doc_processing_std_tools.launcher.calls.audit import Caller
from doc_processing_std_tools.launcher.calls.guards import CallGuards
from doc_processing_std_tools.launcher.compose.access_gate import AccessGate
from doc_processing_std_tools.launcher.compose.completions import EMPTY
from doc_processing_std_tools.launcher.compose.owners import Owners
from doc_processing_std_tools.launcher.config.access import AccessRule
from helpers.compositions import Composed
from helpers.config_entries import EXTERNAL
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
      x: {{command: '{sys.executable}', args: ['{EXTERNAL}', '{os.devnull}'], namespace: x}}
      d: {{module: 'helpers.servers.sample_servers:make_described', namespace: d}}
    profiles:
      ops: {{search: always}}
      finder: {{search: always}}
"""
# everyone: the "ready" tools, no profile (and no server whole: no prompt or resource);
# alice: all of a and c, whoami, the finder profile, the prompts and resources of x and d but
# none of their tools; the ops group: b but its secret, whoami, both profiles
ACCESS = """\
    access:
      - {tools: '*_ready', profiles: []}
      - {users: alice, servers: [a, c, who], profiles: finder}
      - {users: alice, servers: [x, d], exclude: '*', profiles: []}
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
        + "  - {servers: d, exclude: '*'}\n"
    )
    async with launched(config, env={"PYTHONPATH": python_path()}) as session:
        assert await tool_names(session) == {f"a_{t}" for t in OWN - {"secret"}}
        assert text_of(await session.call_tool("a_change", {})) == "changed"
        denied = await session.call_tool("b_change", {})
        assert denied.is_error and text_of(denied) == DENIED.format(user=local, tool="b_change")
        # d's prompts and resources (a rule allows d whole), none of x's
        assert {p.name for p in (await session.list_prompts()).prompts} == {"d_ask"}
        assert not (await session.list_resources()).resources
        templates = (await session.list_resource_templates()).resource_templates
        assert {t.uri_template for t in templates} == {"described://d/{key}"}
        with pytest.raises(MCPError, match=re.escape("Unknown prompt: 'x_greeting'")):
            await session.get_prompt("x_greeting", {"name": "Ann"})
        with pytest.raises(MCPError, match=re.escape("Resource not found: 'note://x/today'")):
            await session.read_resource("note://x/today")


def items(
    port: int, headers: dict[str, str], session: str, path: str = "/mcp"
) -> dict[str, set[str]]:
    """The prompts, resources and resource templates the session (of *path*) lists."""
    found = {}
    for method, kind, key in (
        ("prompts/list", "prompts", "name"),
        ("resources/list", "resources", "uri"),
        ("resources/templates/list", "resourceTemplates", "uriTemplate"),
    ):
        reply = rpc(port, method, {}, session=session, headers=headers, path=path)
        assert reply.status == 200, reply
        found[kind] = {item[key] for item in reply.message()["result"][kind]}
    return found


def asked(
    port: int, headers: dict[str, str], session: str, method: str, **params: Any
) -> dict[str, Any]:
    """The JSON-RPC reply (``result`` or ``error``) to *method* with *params*."""
    reply = rpc(port, method, params, session=session, headers=headers)
    assert reply.status == 200, reply
    return reply.message()


def test_prompts_and_resources_of_a_server_go_only_to_whom_a_rule_allows_it_whole(
    users: Users,
) -> None:
    port = users.daemon.port
    alice = open_session(port, headers=users.alice)
    bob = open_session(port, headers=users.bob)
    allowed = {
        "prompts": {"x_greeting", "d_ask"},
        "resources": {"note://x/today"},
        "resourceTemplates": {"described://d/{key}"},
    }
    assert items(port, users.alice, alice) == allowed
    finder = "/mcp/finder"  # (a profile's endpoint: the same cut)
    assert items(port, users.alice, open_session(port, users.alice, path=finder), finder) == allowed
    assert not any(
        items(port, users.bob, open_session(port, users.bob, path=finder), finder).values()
    )
    assert items(port, users.bob, bob) == {
        "prompts": set(),
        "resources": set(),
        "resourceTemplates": set(),
    }
    get = {"name": "x_greeting", "arguments": {"name": "Ann"}}
    assert "Say hello to Ann." in json.dumps(asked(port, users.alice, alice, "prompts/get", **get))
    read = asked(port, users.alice, alice, "resources/read", uri="described://d/k")
    assert read["result"]["contents"][0]["text"] == "entry k"
    read = asked(port, users.alice, alice, "resources/read", uri="note://x/today")
    assert read["result"]["contents"][0]["text"] == "a note from the external server"
    # bob: every item of x and d answers as an unknown one does (nothing says it exists)
    unknown = asked(port, users.bob, bob, "prompts/get", name="nothing", arguments={})
    denied = asked(port, users.bob, bob, "prompts/get", **get)
    assert denied["error"] == json.loads(
        json.dumps(unknown["error"]).replace("nothing", "x_greeting")
    )
    unknown = asked(port, users.bob, bob, "resources/read", uri="none://x")
    for uri in ("note://x/today", "described://d/k", "note://x/unlisted"):
        denied = asked(port, users.bob, bob, "resources/read", uri=uri)
        assert denied["error"] == json.loads(json.dumps(unknown["error"]).replace("none://x", uri))
    unknown = asked(port, users.bob, bob, "resources/subscribe", uri="none://x")
    denied = asked(port, users.bob, bob, "resources/subscribe", uri="note://x/today")
    assert denied["error"] == json.loads(
        json.dumps(unknown["error"]).replace("none://x", "note://x/today")
    )
    assert "unknown resource" not in json.dumps(
        asked(port, users.alice, alice, "resources/subscribe", uri="note://x/today")
    )
    ref = {"type": "ref/prompt", "name": "x_greeting"}
    completed = asked(
        port,
        users.bob,
        bob,
        "completion/complete",
        ref=ref,
        argument={"name": "name", "value": "A"},
    )
    assert completed["result"]["completion"]["values"] == []


class Listed:
    """A mount as the gate reads it."""

    def __init__(self, name: str, namespace: str | None, prompts=(), resources=()) -> None:
        self.name, self.tools, self.prompts, self.resources = name, (), prompts, resources
        self.entry = type("Entry", (), {"namespace": namespace})()


def test_a_uri_belongs_to_the_server_listing_it_else_to_each_that_may_serve_it() -> None:
    owners = Owners(
        [
            Listed("x", "x", resources=("note://x/today", "note://x/{key}")),
            Listed("open", None, resources=("note://{path*}", "note://x/listed")),
        ]
    )
    assert owners.of_uri("note://x/today") == ("x",)
    assert owners.of_uri("note://x/other") == ("x", "open")  # (templates; x's namespace)
    assert owners.of_uri("note://x/listed") == ("open",)
    assert owners.of_uri("note://x/y/z") == ("open", "x")  # (a template, and x's namespace)
    assert owners.of_uri("none://here") == ()


class Ctx:
    """What the gate reads of a request."""

    def __init__(self, method: str, params: dict[str, Any]) -> None:
        self.method, self.params, self.session, self.request = method, params, None, None


async def test_a_denied_completion_is_empty_and_the_launchers_own_items_stay_listed() -> None:
    composition = Composed(
        mounts=[Listed("x", "x", prompts=("x_greet",), resources=("note://x/{key}",))]
    )
    guards = CallGuards(identify=lambda session, headers: Caller("bob", claims={}))
    gate = AccessGate(composition, guards, Access([AccessRule(users="alice")]))
    asked_of_server = []

    async def served(ctx: Ctx) -> Any:
        asked_of_server.append(ctx.method)
        if ctx.method == "prompts/list":
            return {"prompts": [{"name": "x_greet"}, {"name": "launchers_own"}]}
        return {"completion": {"values": ["Ann"]}}

    for ref in (
        {"type": "ref/prompt", "name": "x_greet"},
        {"type": "ref/resource", "uri": "note://x/{key}"},
    ):
        assert await gate(Ctx("completion/complete", {"ref": ref}), served) == EMPTY
    listed = await gate(Ctx("prompts/list", {}), served)
    assert listed == {"prompts": [{"name": "launchers_own"}]}
    assert asked_of_server == ["prompts/list"]
