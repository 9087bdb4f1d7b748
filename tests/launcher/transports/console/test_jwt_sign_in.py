"""Signing in to the console with a JWT from the team's identity provider: the visitor is its
subject, sees only the tools ``access:`` lets them call, and the cookie lasts no longer than the
token."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.console import console_launcher, csrf_of, get, origin, post
from helpers.idp import AUDIENCE, KeyServer, rsa_key, signed
from helpers.launch import Launched
from helpers.waiting import wait_for

pytest.importorskip("joserfc")


class Idp:
    server: KeyServer
    key: object


idp = Idp()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    idp.server, idp.key = KeyServer(), rsa_key("console")
    idp.server.publish(idp.key)
    folder = tmp_path_factory.mktemp("console-jwt")
    config = textwrap.dedent(
        f"""\
        transport:
          type: http
          auth:
            jwt:
              jwks_uri: {idp.server.issuer}/jwks.json
              issuer: {idp.server.issuer}
              audience: {AUDIENCE}
              jwks_refresh_interval: 0
        audit: {{path: audit.jsonl}}
        access:
          - {{users: alice, servers: [echo]}}
        servers:
          echo:
            module: helpers.servers.sample_servers:echo_server
          fs:
            server: filesystem
            settings: {{roots: ["{folder}"]}}
        """
    )
    try:
        with console_launcher(folder, config) as launched:
            yield launched
    finally:
        idp.server.close()


def sign_in(daemon: Launched, subject: str) -> tuple[str, str]:
    """(the cookie to send, the Set-Cookie header) of *subject*'s sign-in with a 10-minute JWT."""
    token = signed(idp.key, idp.server.issuer, sub=subject)
    response = post(daemon.port, "/ui/signin", {"token": token}, {"origin": origin(daemon.port)})
    assert response.status == 303, response.text  # type: ignore[attr-defined]
    set_cookie = str(response.getheader("set-cookie"))
    return set_cookie.split(";")[0], set_cookie


def test_a_jwt_signs_in_as_its_subject_for_no_longer_than_it_lives(daemon: Launched) -> None:
    cookie, set_cookie = sign_in(daemon, "alice")
    max_age = int(re.search(r"Max-Age=(\d+)", set_cookie).group(1))  # type: ignore[union-attr]
    assert 0 < max_age <= 600
    page = get(daemon.port, "/ui/servers", {"cookie": cookie})
    assert page.status == 200 and ">alice<" in page.text  # type: ignore[attr-defined]


def test_the_tools_page_shows_only_what_access_allows_and_calls_as_the_user(
    daemon: Launched,
) -> None:
    cookie, _ = sign_in(daemon, "alice")
    tools = get(daemon.port, "/ui/tools", {"cookie": cookie}).text  # type: ignore[attr-defined]
    assert 'href="/ui/tools/echo"' in tools and "read_text_file" not in tools
    assert get(daemon.port, "/ui/tools/read_text_file", {"cookie": cookie}).status == 404
    csrf = csrf_of(get(daemon.port, "/ui/tools/echo", {"cookie": cookie}).text)  # type: ignore[attr-defined]
    response = post(
        daemon.port,
        "/ui/tools/echo",
        {"csrf": csrf, "text": "as alice"},
        {"cookie": cookie, "origin": origin(daemon.port)},
    )
    assert response.status == 200 and "as alice" in response.text  # type: ignore[attr-defined]
    audit = Path(daemon.errlog).parent / "audit.jsonl"
    line = wait_for(
        lambda: audit.exists() and [json.loads(x) for x in audit.read_text().splitlines()],
        "the call's audit line",
    )
    assert (line[-1]["user"], line[-1]["tool"], line[-1]["outcome"]) == ("alice", "echo", "ok")


def test_a_user_no_rule_names_sees_no_tool(daemon: Launched) -> None:
    cookie, _ = sign_in(daemon, "mallory")
    tools = get(daemon.port, "/ui/tools", {"cookie": cookie}).text  # type: ignore[attr-defined]
    assert "No tool that you may call" in tools
