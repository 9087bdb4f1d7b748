"""Per-user upstream logins end to end: people signed in to the HTTP daemon with JWTs call an
OAuth server's tool, each with their own upstream login.

One module, one of each: the authorization server + protected MCP server
(``oauth_server.py``, which records the token each call carried, and whose ``meet`` tool tells
whether calls were in flight at once), the identity provider's keys (``helpers.idp.KeyServer``
in this process), and one ``dpt-launch`` daemon with ``transport.auth`` (a static token and
``jwt``) mounting that server with ``auth: oauth``. alice and bob (``dpt-launch login linear
--user ...``, the browser step driven programmatically) and the launcher itself (``dpt-launch
login linear``, what static-token callers use) log in before the daemon starts; carol does
only after her first call. Clients of both kinds call: fastmcp's (the stateless protocol,
served through fastmcp's proxy) and the mcp SDK's ``ClientSession`` (a handshake-era session,
served by the launcher's relay).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from helpers.idp import AUDIENCE, SCOPE, KeyServer, bearer, rsa_key, signed
from helpers.launch import Launched, http_launcher
from helpers.oauth import (
    login_cli_in_process,
    login_in_process,
    server_log,
    start_oauth_server,
    stored,
)
from helpers.rpc import request

STATIC_TOKEN = "static-token-7c2d"
CALLS_EACH = 4  # calls per user, all in flight at once

CONFIG = """\
    transport:
      type: http
      auth:
        token: "${{DPT_TOKEN}}"
        jwt:
          jwks_uri: {jwks_uri}
          issuer: {issuer}
          audience: {audience}
          required_scopes: [{scope}]
    servers:
      linear:
        url: {upstream}/mcp
        auth: oauth
"""


@dataclass
class Users:
    """The module's parts: the daemon, the upstream server's URL, the key server and its key,
    the config and the token store's environment."""

    daemon: Launched
    upstream: str
    idp: KeyServer
    key: Any
    config: Path
    env: dict[str, str]

    def jwt(self, user: str) -> str:
        return signed(self.key, self.idp.issuer, sub=user)

    def token(self, user: str | None = None) -> str:
        """The upstream access token stored for *user* (None: the launcher's own login)."""
        return str(stored(self.env, "linear", user)["tokens"]["access_token"])

    def carried(self, tag_prefix: str) -> list[dict[str, str]]:
        """The server's record of the calls tagged *tag_prefix*-N."""
        return [c for c in server_log(self.upstream)["tagged"] if c["tag"].startswith(tag_prefix)]


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Users]:
    """alice, bob and the launcher itself logged in, then the daemon started; carol is not."""
    folder = tmp_path_factory.mktemp("oauth-users")
    proc, upstream = start_oauth_server(folder, 3600)
    idp = KeyServer()
    key = rsa_key("k1")
    idp.publish(key)
    env = {
        "XDG_DATA_HOME": str(folder / "data"),
        "DPTTOOLS_TOKEN_STORE": "file",
        "DPT_TOKEN": STATIC_TOKEN,  # (the config names it: login reads the whole config)
    }
    config = folder / "tools.yaml"
    config.write_text(
        textwrap.dedent(CONFIG).format(
            jwks_uri=idp.jwks_uri,
            issuer=idp.issuer,
            audience=AUDIENCE,
            scope=SCOPE,
            upstream=upstream,
        )
    )
    try:
        login_cli_in_process(config, "linear", env, user="alice")
        anyio.run(login_in_process, config, "linear", env, "bob")
        anyio.run(login_in_process, config, "linear", env)
        with http_launcher(config, env=env) as launched:
            yield Users(launched, upstream, idp, key, config, env)
    finally:
        idp.close()
        proc.terminate()
        proc.wait(timeout=10)


def linear_state(port: int) -> str:
    reply = request(port, "GET", "/ready", headers=bearer(STATIC_TOKEN))
    return str(json.loads(reply.body)["servers"]["linear"]["state"])


async def calls(
    url: str, token: str, tags: list[str], official: bool = False, tool: str = "whoami"
) -> list[tuple[str, bool]]:
    """One client with *token* making one *tool* call per tag, all at once: each call's
    (text, is_error). fastmcp's client speaks the stateless protocol (every request its own
    connection); with *official*, the mcp SDK's ``ClientSession`` opens a handshake-era session
    (an ``Mcp-Session-Id`` whose later requests the daemon serves on the session's own task)."""
    results: dict[str, tuple[str, bool]] = {}

    async def each(call_tool: Any) -> None:
        async def one(tag: str) -> None:
            arguments = {"tag": tag, "together": 2} if tool == "meet" else {"tag": tag}
            result = await call_tool(tool, arguments)
            text = "".join(getattr(block, "text", "") for block in result.content)
            results[tag] = (text, bool(result.is_error))

        async with anyio.create_task_group() as group:
            for tag in tags:
                group.start_soon(one, tag)

    if official:
        import httpx2
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async with (
            httpx2.AsyncClient(headers=bearer(token), timeout=30) as http,
            streamable_http_client(url, http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await each(session.call_tool)
    else:
        from fastmcp import Client

        async with Client(url, auth=token) as client:
            await each(client.call_tool_mcp)
    return [results[tag] for tag in tags]


@pytest.mark.slow
async def test_two_users_call_at_once_each_with_their_own_upstream_token(users: Users) -> None:
    tags = {u: [f"pair-{u}-{i}" for i in range(CALLS_EACH)] for u in ("alice", "bob")}
    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            answers: dict[str, list[tuple[str, bool]]] = {}

            async def as_user(user: str) -> None:
                official = user == "bob"  # (one client of each kind)
                answers[user] = await calls(users.daemon.url, users.jwt(user), tags[user], official)

            group.start_soon(as_user, "alice")
            group.start_soon(as_user, "bob")
    assert answers == {u: [("hello", False)] * CALLS_EACH for u in ("alice", "bob")}
    tokens = {u: users.token(u) for u in ("alice", "bob")}
    assert len({*tokens.values(), users.token()}) == 3
    for user in ("alice", "bob"):
        record = users.carried(f"pair-{user}-")
        assert sorted(c["tag"] for c in record) == sorted(tags[user])
        assert {c["token"] for c in record} == {tokens[user]}, user

    # a later client of alice's, of the other kind, calls with her upstream token again
    again = await calls(users.daemon.url, users.jwt("alice"), ["again-alice"], official=True)
    assert again == [("hello", False)]
    assert {c["token"] for c in users.carried("again-alice")} == {users.token("alice")}


@pytest.mark.slow
async def test_one_users_calls_run_at_once_upstream(users: Users) -> None:
    """Two read-only calls of alice's (no process lock) are both in flight on her upstream
    session at once: the server sees them meet."""
    from fastmcp import Client

    answers: list[str] = []
    async with Client(users.daemon.url, auth=users.jwt("alice")) as client:

        async def one(tag: str) -> None:
            result = await client.call_tool_mcp("meet", {"tag": tag, "together": 2})
            answers.append("".join(getattr(block, "text", "") for block in result.content))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                for tag in ("alice-meet-0", "alice-meet-1"):
                    group.start_soon(one, tag)
    assert answers == ["met", "met"]
    alice = users.token("alice")
    assert [c["token"] for c in users.carried("alice-meet-")] == [alice, alice]


@pytest.mark.slow
async def test_two_users_on_handshake_sessions_do_not_take_turns(users: Users) -> None:
    """alice's and bob's calls on handshake-era sessions (the relayed path, where the client
    sessions of one server's own session take turns) run at once: each on its user's session."""
    answers: dict[str, list[tuple[str, bool]]] = {}

    async def as_user(user: str) -> None:
        tag = f"both-meet-{user}"
        answers[user] = await calls(users.daemon.url, users.jwt(user), [tag], True, "meet")

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(as_user, "alice")
            group.start_soon(as_user, "bob")
    assert answers == {"alice": [("met", False)], "bob": [("met", False)]}
    tokens = {u: users.token(u) for u in ("alice", "bob")}
    assert {c["tag"]: c["token"] for c in users.carried("both-meet-")} == {
        f"both-meet-{u}": tokens[u] for u in ("alice", "bob")
    }


@pytest.mark.slow
async def test_a_static_token_caller_uses_the_launchers_own_login(users: Users) -> None:
    assert linear_state(users.daemon.port) == "up"
    answers = await calls(users.daemon.url, STATIC_TOKEN, ["static-0", "static-1"])
    assert answers == [("hello", False)] * 2
    assert {c["token"] for c in users.carried("static-")} == {users.token()}


@pytest.mark.slow
async def test_a_user_without_a_login_is_told_to_log_in_then_their_login_is_used(
    users: Users,
) -> None:
    line = (
        "server 'linear' needs a login for user 'carol': run dpt-launch login linear --user carol"
    )
    answers = await calls(users.daemon.url, users.jwt("carol"), ["carol-0"], official=True)
    assert answers == [(line, True)]
    assert users.carried("carol-") == []  # the call never reached the server with someone's token

    await login_in_process(users.config, "linear", users.env, user="carol")
    token = users.token("carol")
    assert await calls(users.daemon.url, users.jwt("carol"), ["carol-1"]) == [("hello", False)]
    assert [c["token"] for c in users.carried("carol-")] == [token]


@pytest.mark.slow
async def test_after_expiry_each_user_refreshes_their_own_token(users: Users) -> None:
    """The server expires every token: each user's next calls refresh that user's own login
    (kept under their name) and carry the new token, never the other's."""
    import urllib.request

    before = {u: users.token(u) for u in ("alice", "bob")}
    expire = urllib.request.Request(users.upstream + "/admin/expire", method="POST")
    urllib.request.urlopen(expire, timeout=10).read()
    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            for user in ("alice", "bob"):
                tags = [f"{user}-refreshed-{i}" for i in range(2)]
                group.start_soon(calls, users.daemon.url, users.jwt(user), tags, user == "bob")
    for user in ("alice", "bob"):
        now = users.token(user)
        assert now not in before.values()
        assert [c["token"] for c in users.carried(f"{user}-refreshed-")] == [now, now], user
