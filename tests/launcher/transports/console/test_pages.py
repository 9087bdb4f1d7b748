"""The console's guards over plain HTTP, on a real ``dpt-launch``: no page without the cookie,
no action from another site or without the page's CSRF token, the security headers, and a
call from the console audited as the signed-in user."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.requests import Request

from doc_processing_std_tools.launcher.transports.console.visitors import loopback_client
from helpers.console import (
    config_text,
    console_launcher,
    csrf_of,
    get,
    origin,
    post,
    signed_in_cookie,
)
from helpers.launch import Launched
from helpers.waiting import wait_for


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    with console_launcher(tmp_path_factory.mktemp("console")) as launched:
        yield launched


def audit_lines(daemon: Launched) -> list[dict[str, object]]:
    path = Path(daemon.errlog).parent / "audit.jsonl"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("page", ["/ui/servers", "/ui/tools", "/ui/tools/echo", "/ui/pins"])
def test_a_page_without_the_cookie_sends_to_sign_in(daemon: Launched, page: str) -> None:
    response = get(daemon.port, page)
    assert (response.status, response.getheader("location")) == (303, "/ui/signin")
    forged = get(daemon.port, page, {"cookie": "dpt_console=not-the-token"})
    assert (forged.status, forged.getheader("location")) == (303, "/ui/signin")


def test_the_activity_stream_without_the_cookie_is_refused(daemon: Launched) -> None:
    response = get(daemon.port, "/ui/activity/stream", {"accept": "text/event-stream"})
    assert response.status == 401


def test_a_wrong_token_does_not_sign_in(daemon: Launched) -> None:
    response = post(daemon.port, "/ui/signin", {"token": "nope"}, {"origin": origin(daemon.port)})
    assert response.status == 401
    assert response.getheader("set-cookie") is None
    assert "not accepted" in response.text  # type: ignore[attr-defined]


def test_sign_in_sets_a_strict_http_only_cookie_and_pages_forbid_inline_scripts(
    daemon: Launched,
) -> None:
    response = post(
        daemon.port, "/ui/signin", {"token": "console-token-5e1d"}, {"origin": origin(daemon.port)}
    )
    cookie = str(response.getheader("set-cookie"))
    assert response.status == 303 and response.getheader("location") == "/ui/servers"
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "Secure" not in cookie  # (plain http here; over https it is Secure)
    page = get(daemon.port, "/ui/servers", {"cookie": cookie.split(";")[0]})
    assert page.status == 200
    csp = str(page.getheader("content-security-policy"))
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert "console-token-5e1d" not in page.text  # type: ignore[attr-defined]


def test_a_cross_site_sign_in_is_refused(daemon: Launched) -> None:
    response = post(
        daemon.port,
        "/ui/signin",
        {"token": "console-token-5e1d"},
        {"origin": "https://evil.example"},
    )
    assert response.status == 403 and response.getheader("set-cookie") is None


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
    ],
    ids=["foreign-origin", "cross-site", "same-site-subdomain"],
)
def test_a_cross_site_form_post_does_not_call(daemon: Launched, headers: dict[str, str]) -> None:
    cookie = signed_in_cookie(daemon.port)
    csrf = csrf_of(get(daemon.port, "/ui/tools/echo", {"cookie": cookie}).text)  # type: ignore[attr-defined]
    before = len(audit_lines(daemon))
    response = post(
        daemon.port,
        "/ui/tools/echo",
        {"csrf": csrf, "text": "forged"},
        {"cookie": cookie, **headers},
    )
    assert response.status == 403  # (a foreign Origin: the guard of every route refuses it)
    assert len(audit_lines(daemon)) == before


def test_a_post_without_the_pages_csrf_token_does_not_call(daemon: Launched) -> None:
    cookie = signed_in_cookie(daemon.port)
    before = len(audit_lines(daemon))
    for fields in ({"text": "forged"}, {"text": "forged", "csrf": "0" * 64}):
        response = post(
            daemon.port, "/ui/tools/echo", fields, {"cookie": cookie, "origin": origin(daemon.port)}
        )
        assert response.status == 403
        assert "CSRF" in response.text  # type: ignore[attr-defined]
    assert len(audit_lines(daemon)) == before


def test_a_call_from_the_console_is_audited_as_the_signed_in_user(daemon: Launched) -> None:
    cookie = signed_in_cookie(daemon.port)
    csrf = csrf_of(get(daemon.port, "/ui/tools/echo", {"cookie": cookie}).text)  # type: ignore[attr-defined]
    response = post(
        daemon.port,
        "/ui/tools/echo",
        {"csrf": csrf, "text": "from the console"},
        {"cookie": cookie, "origin": origin(daemon.port)},
    )
    assert response.status == 200
    assert "from the console" in response.text  # type: ignore[attr-defined]
    line = wait_for(
        lambda: next((e for e in audit_lines(daemon) if e["tool"] == "echo"), None),
        "the console's call in the audit log",
    )
    assert (line["user"], line["client"], line["outcome"]) == ("token-1", "dpt-console", "ok")


def test_without_auth_only_loopback_clients_are_served() -> None:
    def request(host: str) -> Request:
        return Request({"type": "http", "client": (host, 5000), "headers": []})

    assert loopback_client(request("127.0.0.1")) and loopback_client(request("::1"))
    assert not loopback_client(request("10.1.2.3"))
    assert not loopback_client(request("testclient"))


def test_servers_show_each_column_and_tools_search_ranks_as_search_tools(daemon: Launched) -> None:
    cookie = signed_in_cookie(daemon.port)
    servers = get(daemon.port, "/ui/servers", {"cookie": cookie}).text  # type: ignore[attr-defined]
    for column in ("State", "Tools", "Restarts", "Upstream sessions", "Why / last error"):
        assert f'<th scope="col">{column}</th>' in servers
    found = get(daemon.port, "/ui/tools?q=create+a+new+directory", {"cookie": cookie}).text  # type: ignore[attr-defined]
    listed = re.findall(r'<li><a href="/ui/tools/([^"]+)"', found)
    assert listed[0] == "create_directory" and "echo" not in listed
    nothing = get(daemon.port, "/ui/tools?q=zzzqqq", {"cookie": cookie}).text  # type: ignore[attr-defined]
    assert "No tool that you may call matches" in nothing


def test_charts_show_a_call_at_once_and_a_stray_login_callback_is_refused(
    daemon: Launched,
) -> None:
    cookie = signed_in_cookie(daemon.port)
    csrf = csrf_of(get(daemon.port, "/ui/tools/echo", {"cookie": cookie}).text)  # type: ignore[attr-defined]
    post(
        daemon.port,
        "/ui/tools/echo",
        {"csrf": csrf, "text": "charted"},
        {"cookie": cookie, "origin": origin(daemon.port)},
    )
    page = get(daemon.port, "/ui/charts", {"cookie": cookie}).text  # type: ignore[attr-defined]
    assert page.count("<figure") == 4
    assert '<polyline points="' in page and 'data-server="echo"' in page
    stray = get(daemon.port, "/ui/login/callback?code=x&state=y")
    assert stray.status == 400 and "no login is waiting" in stray.text  # type: ignore[attr-defined]


@pytest.mark.slow  # (a launcher of its own)
def test_transport_console_false_serves_no_console(tmp_path: Path) -> None:
    text = config_text(tmp_path).replace("type: http\n", "type: http\n  console: false\n")
    with console_launcher(tmp_path, text) as launched:
        assert get(launched.port, "/ui/signin").status == 404
        assert get(launched.port, "/health").status == 200
