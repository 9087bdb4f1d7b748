"""Signing in to the HTTP daemon with the team's identity provider (``transport.auth.jwt``).

A real JWKS endpoint on 127.0.0.1 serves keys made here with joserfc; one real
``dpt-launch`` daemon verifies the tokens signed with them (raw HTTP and fastmcp's
client). Static tokens keep working beside JWTs, the RFC 9728 metadata tells clients
where to sign in, and the access log names the user, never the token.
"""

from __future__ import annotations

import json
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl

import anyio
import pytest

from doc_processing_std_tools.launcher.cli.main import main
from doc_processing_std_tools.launcher.transports.auth import lifetime_problem
from helpers.idp import AUDIENCE, SCOPE, KeyServer, bearer, rsa_key, signed
from helpers.launch import Launched, http_launcher, text_of
from helpers.rpc import initialize_params, open_session, request, rpc

STATIC_TOKEN = "static-token-5b1e"


def sign(key: Any, kid: str | None = None, **claims: Any) -> str:
    """A JWT from this module's identity provider (see :func:`helpers.idp.signed`)."""
    return signed(key, keys.issuer, kid, **claims)


CONFIG = """\
    log_level: INFO
    transport:
      type: http
      log_format: json
      auth:
        token: "${{DPT_TOKEN}}"
        jwt:
          jwks_uri: {jwks_uri}
          issuer: {issuer}
          audience: [other-audience, {audience}]
          required_scopes: [{scope}]
          jwks_refresh_interval: 0
          max_token_lifetime: 86400
    servers:
      who:
        module: helpers.servers.identity_server:whoami_server
"""


class Keys:
    """The module's key server and keys: ``first`` is published, ``stranger`` never is."""

    server: KeyServer
    first: Any
    stranger: Any
    issuer: str = ""


keys = Keys()


@pytest.fixture(scope="module")
def daemon() -> Iterator[Launched]:
    keys.server = KeyServer()
    keys.issuer = keys.server.issuer
    keys.first = rsa_key("first")
    keys.stranger = rsa_key("first")  # the same kid as the published key, another key
    keys.server.publish(keys.first)
    keys.server.signer = keys.first
    config = CONFIG.format(
        jwks_uri=keys.server.jwks_uri, issuer=keys.issuer, audience=AUDIENCE, scope=SCOPE
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "tools.yaml"
            path.write_text(textwrap.dedent(config), encoding="utf-8")
            with http_launcher(path, env={"DPT_TOKEN": STATIC_TOKEN}) as launched:
                yield launched
    finally:
        keys.server.close()


def whoami(port: int, headers: dict[str, str]) -> str:
    session = open_session(port, headers=headers)
    reply = rpc(
        port, "tools/call", {"name": "whoami", "arguments": {}}, session=session, headers=headers
    )
    assert reply.status == 200, reply
    return str(reply.message()["result"]["content"][0]["text"])


# -- accepted --------------------------------------------------------------------------------


def test_a_valid_jwt_calls_tools_and_the_call_runs_as_its_subject(daemon) -> None:
    assert whoami(daemon.port, bearer(sign(keys.first))) == "alice"
    assert whoami(daemon.port, bearer(sign(keys.first, sub="bob"))) == "bob"
    ready = request(daemon.port, "GET", "/ready", headers=bearer(sign(keys.first)))
    assert ready.status == 200 and ready.json()["status"] == "ready"


async def test_fastmcp_client_calls_with_a_jwt(daemon) -> None:
    from fastmcp import Client

    with anyio.fail_after(30):
        async with Client(daemon.url, auth=sign(keys.first, sub="carol")) as client:
            result = await client.call_tool("whoami", {})
    assert text_of(result) == "carol"


async def test_an_mcp_client_finds_the_provider_signs_in_and_calls(daemon) -> None:
    """The official mcp client's OAuth: a 401, the metadata, the provider's metadata,
    registration, the browser step (driven here), the token, then the call."""
    import httpx2
    from fastmcp import Client
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    class Memory:
        tokens: Any = None
        client: Any = None

        async def get_tokens(self) -> Any:
            return self.tokens

        async def set_tokens(self, tokens: Any) -> None:
            self.tokens = tokens

        async def get_client_info(self) -> Any:
            return self.client

        async def set_client_info(self, client_info: Any) -> None:
            self.client = client_info

    redirected: dict[str, str] = {}

    async def browser(url: str) -> None:  # the user's browser, signed in to the provider
        async with httpx2.AsyncClient() as http:
            answer = await http.get(url)
        assert answer.status_code == 302
        redirected.update(parse_qsl(answer.headers["location"].partition("?")[2]))

    async def callback() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=redirected["code"], state=redirected["state"])

    provider = OAuthClientProvider(
        server_url=daemon.url,
        client_metadata=OAuthClientMetadata(
            client_name="test", redirect_uris=["http://127.0.0.1:9/callback"]
        ),
        storage=Memory(),
        redirect_handler=browser,
        callback_handler=callback,
    )
    with anyio.fail_after(60):
        async with Client(daemon.url, auth=provider) as client:
            result = await client.call_tool("whoami", {})
    assert text_of(result) == "signed-in-user"
    asked = keys.server.authorize_requests[-1]
    assert asked["resource"] == daemon.url and asked["scope"] == SCOPE
    assert asked["code_challenge_method"] == "S256"
    assert keys.server.token_requests[-1]["resource"] == daemon.url  # RFC 8707


def test_the_static_token_still_works_beside_jwt_and_has_no_subject(daemon) -> None:
    assert whoami(daemon.port, bearer(STATIC_TOKEN)) == "-"


def test_a_session_opened_by_one_user_does_not_serve_another(daemon) -> None:
    alice = bearer(sign(keys.first))
    session = open_session(daemon.port, headers=alice)
    call = {"name": "whoami", "arguments": {}}
    taken = rpc(
        daemon.port,
        "tools/call",
        call,
        session=session,
        headers=bearer(sign(keys.first, sub="eve")),
    )
    assert taken.status == 404  # the mcp SDK binds a session to the credential that opened it
    own = rpc(daemon.port, "tools/call", call, session=session, headers=alice)
    assert own.message()["result"]["content"][0]["text"] == "alice"


# -- refused ---------------------------------------------------------------------------------

REFUSALS = {
    "wrong audience": lambda: sign(keys.first, aud="someone-else"),
    "no audience": lambda: sign(keys.first, aud=None),
    "wrong issuer": lambda: sign(keys.first, iss="http://127.0.0.1:1/"),
    "expired": lambda: sign(keys.first, exp=int(time.time()) - 120, iat=int(time.time()) - 720),
    "no expiry": lambda: sign(keys.first, exp=None),
    "issued an hour from now": lambda: sign(keys.first, iat=int(time.time()) + 3600),
    "expiring after the year 9999": lambda: sign(keys.first, exp=1e300),
    "living longer than max_token_lifetime": lambda: sign(
        keys.first, iat=int(time.time()), exp=int(time.time()) + 2 * 86400
    ),
    "no subject": lambda: sign(keys.first, sub=None),
    "missing scope": lambda: sign(keys.first, scope="openid"),
    "signed by another key (same kid)": lambda: sign(keys.stranger),
    "signed by an unpublished key": lambda: sign(keys.stranger, kid="unknown"),
    "not a JWT": lambda: "not.a-jwt.at-all",
    "garbage": lambda: "garbage",
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_bad_tokens_get_401_pointing_at_the_metadata(daemon, case) -> None:
    headers = bearer(REFUSALS[case]())
    port = daemon.port
    for reply in (
        rpc(port, "initialize", initialize_params("t"), headers=headers),
        request(port, "GET", "/ready", headers=headers),
    ):
        assert reply.status == 401, (case, reply)
        challenge = reply.headers["www-authenticate"]
        assert challenge.startswith('Bearer error="invalid_token"'), challenge
        assert f'scope="{SCOPE}"' in challenge
        assert (
            f'resource_metadata="http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"'
            in challenge
        )
        assert b"who" not in reply.body


def test_no_token_gets_401_pointing_at_the_metadata(daemon) -> None:
    reply = rpc(daemon.port, "initialize", initialize_params("t"))
    assert reply.status == 401
    assert reply.headers["www-authenticate"] == (
        f'Bearer scope="{SCOPE}", resource_metadata='
        f'"http://127.0.0.1:{daemon.port}/.well-known/oauth-protected-resource/mcp"'
    )
    assert request(daemon.port, "GET", "/health").status == 200  # never needs a token


# -- key rotation ----------------------------------------------------------------------------


def test_a_rotated_key_is_accepted_without_a_restart(daemon) -> None:
    second = rsa_key("second")
    token = sign(second, sub="dave")
    assert (
        rpc(daemon.port, "initialize", initialize_params("t"), headers=bearer(token)).status == 401
    )
    before = keys.server.fetches
    keys.server.publish(keys.first, second)
    try:
        assert whoami(daemon.port, bearer(token)) == "dave"
        assert keys.server.fetches > before  # the unknown kid made the daemon fetch the keys again
        assert whoami(daemon.port, bearer(sign(keys.first))) == "alice"  # the old key still works
    finally:
        keys.server.publish(keys.first)


@pytest.mark.parametrize(("interval", "fetches"), [(60.0, 1), (0.0, 4)])
def test_unknown_keys_refetch_at_most_once_per_interval(interval, fetches) -> None:
    from doc_processing_std_tools.launcher.config.transport import JwtAuthConfig
    from doc_processing_std_tools.launcher.transports.auth import jwt_verifier

    server = KeyServer()
    try:
        key = rsa_key("one")
        server.publish(key)
        config = JwtAuthConfig(
            jwks_uri=server.jwks_uri,
            issuer=server.issuer,
            audience=AUDIENCE,
            jwks_refresh_interval=interval,
        )
        verifier = jwt_verifier(config)
        strangers = [sign(key, kid=f"unknown-{i}", iss=server.issuer) for i in range(3)]

        async def verify_all() -> list[Any]:
            first = await verifier.verify_token(sign(key, iss=server.issuer))
            return [first, *[await verifier.verify_token(token) for token in strangers]]

        results = anyio.run(verify_all)
    finally:
        server.close()
    assert results[0] is not None and results[0].subject == "alice"
    assert results[1:] == [None, None, None]
    assert server.fetches == fetches  # one for the first token, then one per unknown kid at most


def test_keys_that_cannot_be_fetched_refuse_the_token_and_say_why(caplog) -> None:
    from doc_processing_std_tools.launcher.config.transport import JwtAuthConfig
    from doc_processing_std_tools.launcher.transports.auth import jwt_verifier

    server = KeyServer()
    key = rsa_key("one")
    missing = server.base + "/missing.json"
    server.close()  # nothing listens there any more
    results = []
    for uri in (missing, server.jwks_uri):
        config = JwtAuthConfig(jwks_uri=uri, issuer=server.issuer, audience=AUDIENCE)
        verifier = jwt_verifier(config)
        results.append(anyio.run(verifier.verify_token, sign(key, iss=server.issuer)))
    assert results == [None, None]
    said = [r.getMessage() for r in caplog.records if r.name == "dpt-launch.auth"]
    assert len(said) == 2, said
    assert all(
        line.startswith("cannot fetch the signing keys from http://127.0.0.1:") for line in said
    )


# -- discovery -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]
)
@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}"])
def test_the_protected_resource_metadata_names_the_issuer(daemon, path, host) -> None:
    named = host.format(port=daemon.port)
    reply = request(daemon.port, "GET", path, host=named)
    assert reply.status == 200
    assert reply.json() == {
        "resource": f"http://{named}/mcp",
        "authorization_servers": [keys.server.issuer],
        "scopes_supported": [SCOPE],
        "bearer_methods_supported": ["header"],
        "resource_name": "doc-processing-std-tools",
    }


def test_the_metadata_resource_follows_the_configured_public_url() -> None:
    from doc_processing_std_tools.launcher.config.transport import TransportConfig
    from doc_processing_std_tools.launcher.transports.auth import IncomingAuth

    transport = TransportConfig.model_validate(
        {
            "type": "http",
            "auth": {
                "jwt": {
                    "jwks_uri": "https://idp.example/jwks",
                    "issuer": "https://idp.example",
                    "audience": "dpt",
                    "resource": "https://tools.example/team/mcp",
                }
            },
        }
    )
    auth = IncomingAuth(transport, "n")
    scope = {"type": "http", "headers": [(b"host", b"127.0.0.1:9")], "scheme": "http"}
    assert auth.resource_url(scope) == "https://tools.example/team/mcp"
    assert auth.metadata_url(scope) == (
        "https://tools.example/.well-known/oauth-protected-resource/team/mcp"
    )
    assert "/.well-known/oauth-protected-resource/team/mcp" in [r.path for r in auth.routes()]
    document = json.loads(anyio.run(auth._metadata, SimpleNamespace(scope=scope)).body)
    assert document["resource"] == "https://tools.example/team/mcp"
    assert document["authorization_servers"] == ["https://idp.example"]  # as written: no "/" added


# -- the access log --------------------------------------------------------------------------


def test_the_access_log_names_the_user_never_the_token(daemon) -> None:
    token = sign(keys.first, sub="logged-user")
    assert whoami(daemon.port, bearer(token)) == "logged-user"
    assert whoami(daemon.port, bearer(STATIC_TOKEN)) == "-"
    deadline = time.monotonic() + 30
    while True:
        log = daemon.stderr()
        access = [json.loads(line) for line in log.splitlines() if '"dpt-launch.access"' in line]
        calls = [e for e in access if e.get("mcp_method") == "tools/call"]
        if any(e["user"] == "token-1" for e in calls):
            break
        assert time.monotonic() < deadline, log[-2000:]
        time.sleep(0.02)
    assert any(e["user"] == "logged-user" and e["tool"] == "whoami" for e in calls)
    assert token not in log and token.split(".")[2] not in log
    assert STATIC_TOKEN not in log
    assert all(e["user"] is None for e in access if e["status"] == 401)


# -- config ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("auth", "line", "expected"),
    [
        (
            "  auth:\n    jwt:\n      jwks_uri: http://idp.example/jwks\n      issuer: https://idp.example/\n      audience: dpt\n",
            5,
            "transport.auth.jwt.jwks_uri: use https (plain http is accepted only for a loopback host)",
        ),
        (
            "  auth:\n    jwt:\n      jwks_uri: https://idp.example/jwks\n      audience: dpt\n",
            4,
            "transport.auth.jwt.issuer: required key is missing",
        ),
        (
            "  auth:\n    jwt:\n      jwks_uri: https://idp.example/jwks\n      issuer: idp\n      audience: dpt\n",
            6,
            "transport.auth.jwt.issuer: give an http(s) URL with a host",
        ),
        (
            "  auth:\n    jwt:\n      jwks_url: https://idp.example/jwks\n",
            5,
            "transport.auth.jwt.jwks_url: unknown key; did you mean 'jwks_uri'?",
        ),
        ("  auth: {}\n", 3, "transport.auth: give token: or jwt: (or write auth: none)"),
    ],
)
def test_bad_jwt_config_names_file_line_and_key(write_config, capsys, auth, line, expected) -> None:
    path = write_config("transport:\n  type: http\n" + auth + "servers:\n  echo: {}\n")
    assert main(["--config", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"{path}:{line}: {expected}" in err, err


def test_jwt_alone_allows_a_non_loopback_host(write_config, capsys) -> None:
    path = write_config(
        "transport:\n  type: http\n  host: 0.0.0.0\n  auth:\n    jwt: {jwks_uri: https://idp.example/jwks, "
        "issuer: https://idp.example/, audience: dpt}\nservers:\n  echo:\n    module: helpers.servers.sample_servers:echo_server\n"
    )
    assert main(["--config", str(path), "--check"]) == 0, capsys.readouterr().err


def test_the_caller_is_named_on_one_printable_line_and_the_token_never() -> None:
    from doc_processing_std_tools.launcher.transports.identity import (
        acting_as,
        caller_name,
        current_subject,
    )

    def scope(**token: Any) -> dict[str, Any]:
        user = SimpleNamespace(access_token=SimpleNamespace(token="secret-token", **token))
        return {"user": user}

    assert caller_name(scope(subject="alice\nforged line", client_id="x")) == "alice?forged line"
    assert caller_name(scope(subject=None, client_id="token-2")) == "token-2"
    assert caller_name({"user": SimpleNamespace()}) is None  # starlette's unauthenticated user
    assert current_subject() is None
    with acting_as("bob"):
        assert current_subject() == "bob"
    assert current_subject() is None


def test_token_times_are_judged_with_a_minute_of_clock_leeway() -> None:
    now = 1_000_000.0
    ok = {"iat": now + 30, "exp": now + 600}  # (a provider's clock 30 s ahead)
    assert lifetime_problem(ok, None, now) is None
    assert "future" in (lifetime_problem({"iat": now + 3600, "exp": now + 7200}, None, now) or "")
    assert "year 10000" in (lifetime_problem({"exp": 1e300}, None, now) or "")
    assert lifetime_problem({"iat": now, "exp": now + 600}, 600, now) is None
    assert "max_token_lifetime" in (lifetime_problem({"exp": now + 601}, 600, now) or "")
