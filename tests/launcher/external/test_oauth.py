"""Upstream OAuth (``auth: oauth`` on a ``url:`` server): login, calls, refresh, revocation.

One real authorization server + protected MCP server per module (``tests/helpers/servers/oauth_server.py``,
fastmcp's in-memory OAuth provider on 127.0.0.1). The browser step is driven by a plain
HTTP GET of the authorization URL that follows the redirects to the loopback callback of
``dpt-launch login --no-browser``. The server records the access token each call carried.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers.launch import Launched, http_launcher, launcher_command
from helpers.oauth import (
    WAIT,
    login_cli_in_process,
    login_in_process,
    running_oauth_server,
    server_log,
    stored,
)
from helpers.rpc import request
from helpers.waiting import wait_for


@pytest.fixture(scope="module")
def oauth_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The token store of this module's launchers: 0600 files in a folder of its own."""
    folder = tmp_path_factory.mktemp("oauth-data")
    return {"XDG_DATA_HOME": str(folder), "DPTTOOLS_TOKEN_STORE": "file"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The authorization server and protected MCP server (1-hour tokens): its base URL."""
    with running_oauth_server(tmp_path_factory.mktemp("oauth-server"), 3600) as base:
        yield base


def _post(base: str, path: str) -> None:
    urllib.request.urlopen(urllib.request.Request(base + path, method="POST"), timeout=10).read()


def _config(folder: Path, base: str, name: str = "linear", auth: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tools.yaml"
    lines = ["servers:", f"  {name}:", f"    url: {base}/mcp"]
    if auth:
        lines.append("    auth: oauth")
    path.write_text("\n".join(lines) + "\n")
    return path


def dpt(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*launcher_command(), *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        env={**os.environ, **env},
    )


def login(config: Path, name: str, env: dict[str, str]) -> tuple[str, str]:
    """``dpt-launch login NAME --no-browser``, the browser being a GET that follows the
    redirects to the callback. Its (stdout, stderr)."""
    proc = subprocess.Popen(
        [*launcher_command(), "login", name, "--config", str(config), "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), proc.communicate(timeout=WAIT)
    with urllib.request.urlopen(url, timeout=WAIT) as page:  # the "browser": lands on the callback
        assert page.status == 200
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, err
    return url + "\n" + out, err


async def call(url: str, tool: str = "whoami") -> tuple[str, bool]:
    """One call through the launcher at *url*: (text, is_error)."""
    from fastmcp import Client

    async with Client(url) as client:
        result = await client.call_tool_mcp(tool, {})
    return "".join(getattr(block, "text", "") for block in result.content), bool(result.is_error)


async def listed(url: str) -> list[str]:
    from fastmcp import Client

    async with Client(url) as client:
        return [tool.name for tool in await client.list_tools()]


async def wait_for_listed(url: str, name: str) -> list[str]:
    """The launcher's tool list once it holds *name* (after a list_changed)."""
    import anyio

    deadline = time.monotonic() + WAIT
    while name not in (names := await listed(url)):
        assert time.monotonic() < deadline, f"waited {WAIT:g} s for {name} to be listed"
        await anyio.sleep(0.1)
    return names


def states(port: int) -> dict[str, Any]:
    return json.loads(request(port, "GET", "/ready").body)["servers"]


# -- one launcher: linear (logged in), corp (never), plain (no auth) ---------------------------


@dataclass
class Served:
    """One launcher (module-scoped, so a parallel run starts it once) serving ``linear`` (logged
    in with ``dpt-launch login --no-browser`` first), ``corp`` (never logged in) and ``plain``
    (the same server, configured without ``auth``); what the login printed."""

    launched: Launched
    config: Path
    login_out: str
    login_err: str
    first_token: str

    def assert_no_secret_logged(self, *tokens: str) -> None:
        logged = self.launched.stderr()
        for secret in tokens:
            assert secret not in logged


@pytest.fixture(scope="module")
def served(
    server: str, oauth_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    config = tmp_path_factory.mktemp("served") / "tools.yaml"
    config.write_text(
        "servers:\n"
        f"  linear: {{url: {server}/mcp, auth: oauth}}\n"
        f"  corp: {{url: {server}/mcp, auth: oauth, namespace: corp}}\n"
        f"  plain: {{url: {server}/mcp}}\n"
    )
    out, err = login_cli_in_process(config, "linear", oauth_env)
    token = stored(oauth_env, "linear")["tokens"]["access_token"]
    with http_launcher(config, env=oauth_env) as launched:
        yield Served(launched, config, out, err, token)


@pytest.mark.slow
def test_login_keeps_the_token_private_and_says_so(
    served: Served, server: str, oauth_env: dict[str, str]
) -> None:
    token = served.first_token
    assert token not in served.login_out + served.login_err + served.config.read_text()
    assert "logged in to 'linear'" in served.login_err
    folder = Path(oauth_env["XDG_DATA_HOME"]) / "doc-processing-std-tools" / "oauth"
    assert all(f.stat().st_mode & 0o077 == 0 for f in folder.iterdir())
    grants = server_log(server)["grants"]
    assert {"grant_type": "authorization_code", "resource": f"{server}/mcp"} in grants
    served.assert_no_secret_logged(token)


def test_a_server_that_wants_a_login_names_the_config_line_to_add(served: Served) -> None:
    """plain: a 401 with WWW-Authenticate names the config line to add."""
    plain = states(served.launched.port)["plain"]
    assert plain["state"] == "failed"
    assert (
        "HTTP 401: the server wants an OAuth login; add 'auth: oauth' under servers.plain "
        "in the config, then run dpt-launch login plain" in plain["reason"]
    )


async def test_a_call_carries_the_stored_token_and_one_expired_early_is_refreshed(
    served: Served, server: str, oauth_env: dict[str, str]
) -> None:
    url = served.launched.url
    assert states(served.launched.port)["linear"]["state"] == "up"
    token = stored(oauth_env, "linear")["tokens"]["access_token"]
    assert await call(url) == ("hello", False)
    assert server_log(server)["calls"][-1] == token
    _post(server, "/admin/expire")
    assert await call(url) == ("hello", False)
    refreshed = server_log(server)["calls"][-1]
    assert refreshed != token
    assert stored(oauth_env, "linear")["tokens"]["access_token"] == refreshed
    grants = server_log(server)["grants"]
    assert {"grant_type": "refresh_token", "resource": f"{server}/mcp"} in grants
    served.assert_no_secret_logged(token, refreshed)


async def test_a_revoked_login_needs_a_login_until_logged_in_again(
    served: Served,
    server: str,
    oauth_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Revoked: needs-login, tools still listed, one line per call, then a new login serves."""
    import anyio

    from doc_processing_std_tools.launcher.cli.main import main

    port, url = served.launched.port, served.launched.url
    revoked = stored(oauth_env, "linear")["tokens"]["access_token"]
    _post(server, "/admin/revoke")
    _post(server, "/admin/expire")
    line = "server 'linear' needs a login: run dpt-launch login linear"
    text, is_error = await call(url)
    assert is_error and line in text, text
    wait_for(lambda: states(port)["linear"]["state"] == "needs-login", "needs-login")
    assert states(port)["linear"]["reason"] == line
    assert await call(url) == (line, True)
    assert "whoami" in await listed(url)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in oauth_env.items():
            patch.setenv(key, value)
        listing = ["login", "--list", "--config", str(served.config)]
        assert await anyio.to_thread.run_sync(main, listing) == 0
    assert "linear  refused: the server no longer accepts it" in capsys.readouterr().out
    await login_in_process(served.config, "linear", oauth_env)
    fresh = stored(oauth_env, "linear")["tokens"]["access_token"]
    wait_for(lambda: states(port)["linear"]["state"] == "up", "up again")
    assert await call(url) == ("hello", False)
    assert server_log(server)["calls"][-1] == fresh
    served.assert_no_secret_logged(revoked, fresh)


async def test_a_server_logged_in_while_the_launcher_runs_shows_its_tools(
    served: Served, oauth_env: dict[str, str]
) -> None:
    """corp: never logged in, then logged in: its tools appear in the running launcher."""
    port, url = served.launched.port, served.launched.url
    corp_line = "server 'corp' needs a login: run dpt-launch login corp"
    assert states(port)["corp"] == {
        "state": "needs-login",
        "required": False,
        "reason": corp_line,
        "sessions": {"mode": "per_user", "open": 0, "max": 16},
    }
    assert "corp_whoami" not in await listed(url)  # no tool list kept yet
    await login_in_process(served.config, "corp", oauth_env)
    wait_for(lambda: states(port)["corp"]["state"] == "up", "corp up")
    assert "corp_whoami" in await wait_for_listed(url, "corp_whoami")
    assert await call(url, "corp_whoami") == ("hello", False)
    served.assert_no_secret_logged(stored(oauth_env, "corp")["tokens"]["access_token"])


def test_check_warns_login_list_and_logout(
    server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import anyio

    from doc_processing_std_tools.launcher.cli.main import main

    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "DPTTOOLS_TOKEN_STORE": "file"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = _config(tmp_path, server, name="corp")
    config.write_text(config.read_text() + "    required: true\n")
    assert main(["--config", str(config), "--check", "--strict"]) == 0  # (a login mends it)
    line = "server 'corp' needs a login: run dpt-launch login corp"
    assert f"WARN servers.corp: {line}" in " ".join(capsys.readouterr().out.split())

    anyio.run(login_in_process, config, "corp", env)
    assert main(["login", "--list", "--config", str(config)]) == 0
    assert "corp  logged in, access token expires" in capsys.readouterr().out
    assert main(["logout", "corp", "--config", str(config)]) == 0
    assert "corp: forgot the login" in capsys.readouterr().err
    assert main(["login", "--list", "--config", str(config)]) == 0
    assert "corp  no login" in capsys.readouterr().out


def test_login_refuses_a_server_without_oauth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from doc_processing_std_tools.launcher.cli.main import main

    config = _config(tmp_path, "http://127.0.0.1:9", name="plain", auth=False)
    assert main(["login", "plain", "--config", str(config)]) == 2
    assert "servers.plain does not use OAuth (add 'auth: oauth' under it first)" in (
        capsys.readouterr().err
    )


# -- per-user logins ---------------------------------------------------------------------------


async def test_each_signed_in_user_calls_with_their_own_login_on_their_own_session(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call serving a signed-in user (``identity.current_subject()``) uses that user's login
    and session; a user without one gets the line with ``--user``; the launcher's own state is
    untouched."""
    import anyio

    from doc_processing_std_tools.launcher.config.schema import load_config
    from doc_processing_std_tools.launcher.external.supervisor import Supervisor
    from doc_processing_std_tools.launcher.external.tokens import TokenStore
    from doc_processing_std_tools.launcher.transports.identity import (
        acting_as,
        current_subject,
    )

    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "DPTTOOLS_TOKEN_STORE": "file"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = _config(tmp_path, server, name="linear")
    for user in ("alice", "bob"):
        await login_in_process(config, "linear", env, user=user)
    store = TokenStore()
    tokens = {u: store.get("linear", u)["tokens"]["access_token"] for u in ("alice", "bob")}  # type: ignore[index]
    assert tokens["alice"] != tokens["bob"]

    supervisor = Supervisor("linear", load_config(config).config.servers["linear"], tmp_path)
    supervisor.subject = current_subject

    async def call_as(user: str | None) -> tuple[str, bool, str]:
        with acting_as(user):
            why = supervisor.unavailable()
            if why is not None:
                return why, True, ""
            client = await supervisor.client()
            result = await client.call_tool_mcp("whoami", {})
            text = "".join(getattr(b, "text", "") for b in result.content)
            carried = server_log(server)["calls"][-1] if not result.is_error else ""
            return text, bool(result.is_error), carried

    async def session_of(user: str) -> Any:
        with acting_as(user):
            return await supervisor.client()

    async with anyio.create_task_group() as group:
        group.start_soon(supervisor.run)
        await supervisor.wait_started()
        assert supervisor.state == "needs-login"  # (the launcher's own login: none)
        assert await call_as("alice") == ("hello", False, tokens["alice"])
        assert await call_as("bob") == ("hello", False, tokens["bob"])
        assert await call_as("alice") == ("hello", False, tokens["alice"])
        first = await session_of("alice")
        assert first is not await session_of("bob")  # one session per user
        _post(server, "/admin/expire")  # alice's next call refreshes her token on her session
        text, is_error, refreshed = await call_as("alice")
        assert (text, is_error) == ("hello", False) and refreshed != tokens["alice"]
        assert store.get("linear", "alice")["tokens"]["access_token"] == refreshed  # type: ignore[index]
        assert await session_of("alice") is first  # her own refresh: kept open
        await login_in_process(config, "linear", env, user="alice")  # a new login: reopened
        again = store.get("linear", "alice")["tokens"]["access_token"]  # type: ignore[index]
        assert await call_as("alice") == ("hello", False, again)
        assert await session_of("alice") is not first
        carol = await call_as("carol")
        assert carol[:2] == (
            "server 'linear' needs a login for user 'carol': run dpt-launch login linear "
            "--user carol",
            True,
        )
        own = await call_as(None)
        assert own[:2] == ("server 'linear' needs a login: run dpt-launch login linear", True)
        supervisor.stop()


# -- the token store ----------------------------------------------------------------------


def test_the_token_store_keeps_one_login_per_server_and_user_in_0600_files(
    tmp_path: Path,
) -> None:
    from doc_processing_std_tools.launcher.external.tokens import TokenStore

    store = TokenStore(tmp_path / "oauth", keyring=None)
    assert store.get("linear") is None
    before = store.stamp("linear")
    store.put("linear", {"tokens": {"access_token": "mine"}})
    store.put("linear", {"tokens": {"access_token": "alice's"}}, user="alice")
    assert store.stamp("linear") != before
    assert store.get("linear") == {"tokens": {"access_token": "mine"}}
    assert store.get("linear", user="alice") == {"tokens": {"access_token": "alice's"}}
    assert store.get("linear", user="bob") is None
    assert (tmp_path / "oauth").stat().st_mode & 0o777 == 0o700
    assert all(f.stat().st_mode & 0o077 == 0 for f in (tmp_path / "oauth").iterdir())
    assert store.delete("linear", user="alice") and not store.delete("linear", user="alice")
    assert store.get("linear", user="alice") is None and store.get("linear") is not None


def test_the_keyring_is_used_when_it_has_a_backend(tmp_path: Path) -> None:
    from doc_processing_std_tools.launcher.external.tokens import TokenStore

    class FakeKeyring:
        def __init__(self) -> None:
            self.kept: dict[tuple[str, str], str] = {}

        def get_keyring(self) -> object:
            return self

        def get_password(self, service: str, key: str) -> str | None:
            return self.kept.get((service, key))

        def set_password(self, service: str, key: str, value: str) -> None:
            self.kept[(service, key)] = value

        def delete_password(self, service: str, key: str) -> None:
            del self.kept[(service, key)]

    ring = FakeKeyring()
    store = TokenStore(tmp_path / "oauth", keyring=ring)
    store.put("linear", {"tokens": {"access_token": "x"}}, user="alice")
    assert ring.kept == {("dpt-launch", "linear user=alice"): '{"tokens":{"access_token":"x"}}'}
    assert not list((tmp_path / "oauth").glob("*.json"))  # only the stamp, no secret, on disk
    assert store.get("linear", user="alice") == {"tokens": {"access_token": "x"}}
    assert store.delete("linear", user="alice") and store.get("linear", user="alice") is None


# -- the config -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        ("oauth", {"client_id": None, "scopes": []}),
        ({"oauth": None}, {"client_id": None, "scopes": []}),
        (
            {"oauth": {"client_id": "dpt", "client_secret": "s", "scopes": ["read", "write"]}},
            {"client_id": "dpt", "scopes": ["read", "write"]},
        ),
        ({"oauth": {"scopes": "read write"}}, {"client_id": None, "scopes": ["read", "write"]}),
    ],
)
def test_auth_oauth_forms(auth: Any, expected: dict[str, Any]) -> None:
    from doc_processing_std_tools.launcher.config.schema import ServerEntry

    entry = ServerEntry.model_validate({"url": "https://mcp.example.com/mcp", "auth": auth})
    assert entry.auth is not None
    got = entry.auth.oauth
    assert {"client_id": got.client_id, "scopes": got.scopes} == expected
    assert "'s'" not in repr(entry)  # the secret stays hidden


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"command": "x", "auth": "oauth"}, "'auth' applies only to a 'url' server"),
        ({"url": "https://a.example/mcp", "auth": "basic"}, "write auth: oauth"),
        (
            {"url": "https://a.example/mcp", "auth": "oauth", "headers": {"Authorization": "x"}},
            "give either 'auth' or an Authorization header",
        ),
        (
            {"url": "https://a.example/mcp", "auth": {"oauth": {"client_secret": "s"}}},
            "'client_secret' needs the 'client_id'",
        ),
    ],
)
def test_auth_mistakes_are_config_errors(entry: dict[str, Any], message: str) -> None:
    from pydantic import ValidationError

    from doc_processing_std_tools.launcher.config.schema import ServerEntry

    with pytest.raises(ValidationError, match=message):
        ServerEntry.model_validate(entry)


# -- slow: tokens that expire while the launcher runs ------------------------------------------


@pytest.mark.slow
async def test_short_lived_tokens_are_refreshed_before_they_expire(
    tmp_path: Path, oauth_env: dict[str, str]
) -> None:
    """Tokens of 3 s: the launcher's pings refresh each one before the server would refuse it;
    every call succeeds and the server never had to refuse an expired one."""
    import anyio

    with running_oauth_server(tmp_path, 3) as base:
        config = _config(tmp_path / "c", base, name="short")
        login(config, "short", oauth_env)
        with http_launcher(config, env=oauth_env) as launched:
            for _ in range(4):
                assert await call(launched.url) == ("hello", False)
                await anyio.sleep(2)
            log = server_log(base)
            refreshes = [g for g in log["grants"] if g["grant_type"] == "refresh_token"]
            assert refreshes and all(g["resource"] == f"{base}/mcp" for g in refreshes)
            assert len(set(log["calls"])) > 1
