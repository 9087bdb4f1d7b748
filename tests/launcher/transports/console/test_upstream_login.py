"""The "Log in" button's flow against the test authorization server (``helpers/oauth.py``): the
browser sent to authorize and back to the daemon's callback, the tokens kept where
``dpt-launch login`` keeps them; a callback that is not awaited is refused."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from doc_processing_std_tools.launcher.config.schema import load_config
from doc_processing_std_tools.launcher.external.tokens import TokenStore
from doc_processing_std_tools.launcher.transports.console import upstream_login
from doc_processing_std_tools.launcher.transports.console.upstream_login import (
    LoginRefused,
    Logins,
)
from helpers.oauth import running_oauth_server, server_log

CALLBACK = "http://127.0.0.1:9/ui/login/callback"  # (never reached: the test is the browser)


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_oauth_server(tmp_path_factory.mktemp("idp"), 3600) as base:
        yield base


def logins(folder: Path, idp: str) -> tuple[Logins, TokenStore]:
    config = folder / "tools.yaml"
    config.write_text(
        f"servers:\n  corp: {{url: {idp}/mcp, auth: oauth}}\n  plain: {{url: {idp}/mcp}}\n"
    )
    entries = load_config(config).config.servers
    store = TokenStore(folder / "oauth", keyring=None)
    return Logins(lambda: entries, lambda: store), store


async def authorize(url: str) -> dict[str, str]:
    """The browser at the authorization server: where it is sent back to, as a query."""
    async with httpx2.AsyncClient(follow_redirects=False) as client:
        reply = await client.get(url)
    location = reply.headers["location"]
    assert location.startswith(CALLBACK), location
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


async def test_a_login_through_the_callback_keeps_the_tokens_of_dpt_launch_login(
    tmp_path: Path, idp: str
) -> None:
    console, store = logins(tmp_path, idp)
    assert console.servers() == {"corp"}
    url = await console.start("corp", CALLBACK)
    query = parse_qs(urlsplit(url).query)
    assert query["code_challenge_method"] == ["S256"] and query["redirect_uri"] == [CALLBACK]
    answer = await authorize(url)
    outcome, failed = await console.finish(answer)
    assert (outcome, failed) == ("logged in to 'corp': 2 tools", False)
    record = store.get("corp")
    assert record is not None and record["tokens"]["access_token"]
    assert {g["grant_type"] for g in server_log(idp)["grants"]} >= {"authorization_code"}
    again = await console.finish(answer)  # (used once)
    assert again == ("no login is waiting for this answer (it expired or was used)", True)


async def test_a_forged_state_or_a_server_without_oauth_is_refused(
    tmp_path: Path, idp: str
) -> None:
    console, store = logins(tmp_path, idp)
    with pytest.raises(LoginRefused, match="no OAuth server 'plain'"):
        await console.start("plain", CALLBACK)
    url = await console.start("corp", CALLBACK)
    answer = await authorize(url)
    forged = {**answer, "state": "not-the-state"}
    assert (await console.finish(forged))[1] is True
    refused = {"state": answer["state"], "error": "access_denied"}
    outcome, failed = await console.finish(refused)
    assert failed and "refused by the authorization server: access_denied" in outcome
    assert store.get("corp") is None


async def test_pressing_log_in_again_replaces_the_waiting_login(tmp_path: Path, idp: str) -> None:
    """One login per server waits for its browser: the earlier one is cancelled and its answer
    refused, so repeated presses pile nothing up."""
    console, store = logins(tmp_path, idp)
    first = await console.start("corp", CALLBACK)
    second = await console.start("corp", CALLBACK)
    stale = await authorize(first)
    assert (await console.finish(stale))[1] is True
    outcome, failed = await console.finish(await authorize(second))
    assert (outcome, failed) == ("logged in to 'corp': 2 tools", False)
    assert store.get("corp") is not None


async def test_a_login_that_ended_once_its_url_was_shown_is_refused_not_linked(
    tmp_path: Path, idp: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its URL shown, the login ends before the button's request resumes (pressed again, the
    daemon stopping, a failure): the button says why, and links to no URL that cannot answer."""

    async def shown_then_ended(
        name: str, entry: Any, store: Any, *, show_url: Callable[[str], Awaitable[None]], **_: Any
    ) -> list[Any]:
        await show_url("https://idp.example/authorize?state=s1")
        raise RuntimeError("the token endpoint went away")

    monkeypatch.setattr(upstream_login, "login_flow", shown_then_ended)
    console, _ = logins(tmp_path, idp)
    with pytest.raises(LoginRefused, match="the token endpoint went away"):
        await console.start("corp", CALLBACK)
    assert (await console.finish({"state": "s1", "code": "c"}))[1] is True
