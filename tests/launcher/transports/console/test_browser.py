"""The console in a real browser (Chromium through Playwright) against a real ``dpt-launch``:
sign in by keyboard, see the servers (one killed and restarted, one logged in to through the
test authorization server by its "Log in" button), search the tools and run one from its
generated form, watch the call appear in Activity, approve a drifted pin, read the charts;
each page labelled, usable by keyboard and without horizontal overflow at 1280 and 800 px.
Each page's screenshot goes to docs/ui/ with ``DPT_UI_SCREENSHOTS=1`` (docs/ui.md)."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from doc_processing_std_tools.launcher.calls.pins import LockFile
from doc_processing_std_tools.launcher.cli.main import main
from helpers.console import (
    OVERFLOW,
    TOKEN,
    UNLABELLED,
    browser,
    config_text,
    console_launcher,
    screenshot,
    tab_to,
)
from helpers.oauth import start_oauth_server
from helpers.paths import SERVERS
from helpers.processes import child_pids, cmdline, started_at
from helpers.waiting import WAIT

TIMEOUT_MS = 30_000
APPROVED = "Approved text that the server no longer serves."
WIDTHS = (1280, 800)


@pytest.fixture
def drifted_lock(tmp_path: Path) -> Path:
    """The lock file of every served definition, but for one description (a drift); made before
    the browser starts (Playwright's sync API holds an event loop in the thread)."""
    folder = tmp_path
    config = folder / "tools.yaml"
    config.write_text(config_text(folder), encoding="utf-8")
    assert main(["pin", "--config", str(config)]) == 0
    lock = folder / "tools.lock"
    pins = LockFile.read(lock)
    pins.servers["fs"]["tools"]["create_directory"]["description"] = APPROVED
    pins.write(lock)
    return lock


def check_page(page: Any) -> None:
    """Every control labelled, nothing wider than the window, at each width."""
    assert page.evaluate(UNLABELLED) == [], page.url
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 800})
        overflow = page.evaluate(OVERFLOW)
        assert overflow == {"page": 0, "main": 0}, (page.url, width, overflow)
    page.set_viewport_size({"width": 1280, "height": 800})


def state_of(page: Any, server: str) -> str:
    return str(page.locator(f'tr[data-server="{server}"] .state').inner_text())


def reload_until(page: Any, server: str, state: str) -> None:
    """Reload the Servers page until *server* shows *state* (each load is a fresh reading)."""
    deadline = time.monotonic() + WAIT
    while state_of(page, server) != state:
        assert time.monotonic() < deadline, f"{server} never showed {state}"
        page.reload()


@pytest.fixture
def context() -> Iterator[Any]:
    with browser() as chromium:
        made = chromium.new_context(viewport={"width": 1280, "height": 800})
        made.set_default_timeout(TIMEOUT_MS)
        yield made
        made.close()


def signed_in(context: Any, base: str, errors: list[str]) -> Any:
    page = context.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{base}/ui")
    assert page.url.endswith("/ui/signin")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/ui/servers$"))
    return page


@pytest.mark.slow
def test_sign_in_search_run_a_tool_watch_activity_and_approve_a_pin(
    drifted_lock: Path, tmp_path: Path, context: Any
) -> None:
    lock = drifted_lock
    shots = tmp_path / "shots"
    with console_launcher(tmp_path, config_text(tmp_path)) as daemon:
        base = f"http://127.0.0.1:{daemon.port}"
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

        page.goto(f"{base}/ui")
        assert page.url.endswith("/ui/signin")
        check_page(page)
        assert tab_to(page, "Token")
        page.keyboard.type(TOKEN)
        screenshot(page, "signin", shots)
        assert tab_to(page, "Sign in")
        page.keyboard.press("Enter")  # (by keyboard alone)

        page.wait_for_url(re.compile(r"/ui/servers$"))
        for server in ("echo", "fs"):
            assert state_of(page, server) == "up"
        check_page(page)

        # Activity listens in a tab of its own before the call is made.
        activity = context.new_page()
        activity.goto(f"{base}/ui/activity")
        activity.get_by_text("Live:").wait_for()

        page.get_by_role("link", name="Tools").click()
        page.get_by_role("link", name="echo", exact=True).wait_for()
        assert page.get_by_role("link", name="create_directory").count() == 0  # (drifted)
        check_page(page)
        screenshot(page, "tools", shots)
        page.get_by_label("Search").fill("read a file")
        page.get_by_role("button", name="Search").click()
        page.get_by_text("Best matches").wait_for()
        found = page.locator("#tool-list li a").all_inner_texts()
        assert found[0] in {"read_text_file", "read_file"} and "echo" not in found
        screenshot(page, "search", shots)

        page.goto(f"{base}/ui/tools/echo")
        check_page(page)
        assert tab_to(page, "text")
        page.keyboard.type("hello from the browser")
        assert tab_to(page, "Call echo")
        page.keyboard.press("Enter")
        result = page.locator("section.result pre.output").first
        assert result.inner_text() == "hello from the browser"
        screenshot(page, "tool", shots)

        row = activity.locator("#activity tbody tr").filter(has_text="echo")
        row.wait_for()
        assert "token-1" in row.inner_text() and "ok" in row.inner_text()
        check_page(activity)
        screenshot(activity, "activity", shots)
        activity.close()  # (its audit subscription ends with the stream)

        page.get_by_role("link", name="Charts").click()
        page.locator('polyline[data-server="echo"]').first.wait_for(state="attached")
        check_page(page)
        screenshot(page, "charts", shots)

        page.get_by_role("link", name="Pins").click()
        drift = page.locator("section.drift").filter(has_text="fs.create_directory")
        assert "changed" in drift.inner_text() and APPROVED in drift.inner_text()
        check_page(page)
        screenshot(page, "pins", shots)
        drift.get_by_role("button", name="Approve fs.create_directory").click()
        page.get_by_text("No drift").wait_for()
        assert APPROVED not in lock.read_text()

        page.get_by_role("link", name="Tools").click()
        page.get_by_role("link", name="create_directory").wait_for()  # served after the reload

        page.get_by_role("button", name="Sign out").click()
        page.wait_for_url(re.compile(r"/ui/signin$"))
        page.goto(f"{base}/ui/servers")
        assert page.url.endswith("/ui/signin")
        assert errors == []  # (no script error, no CSP violation)


@pytest.mark.slow
def test_a_killed_server_restarts_and_an_oauth_server_is_logged_in_by_its_button(
    tmp_path: Path, context: Any
) -> None:
    idp, idp_base = start_oauth_server(tmp_path, 3600)
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "DPTTOOLS_TOKEN_STORE": "file"}
    extra = (
        f"  ext:\n    command: {sys.executable}\n"
        f"    args: [{SERVERS / 'external_server.py'}, {tmp_path / 'count'}]\n"
        f"  corp: {{url: {idp_base}/mcp, auth: oauth}}\n"
    )
    try:
        with console_launcher(tmp_path, config_text(tmp_path, extra), env) as daemon:
            base = f"http://127.0.0.1:{daemon.port}"
            errors: list[str] = []
            page = signed_in(context, base, errors)
            reload_until(page, "ext", "up")
            assert state_of(page, "corp") == "needs-login"
            assert page.locator('tr[data-server="ext"] td').nth(3).inner_text() == "1"
            check_page(page)
            screenshot(page, "servers", shots := tmp_path / "shots")

            # (the server's session's child is the first started, just before the one for the
            # first client's own session: in the same clock tick, the lower pid)
            children = [
                p for p in child_pids(daemon.proc.pid) if "external_server.py" in cmdline(p)
            ]
            os.kill(min(children, key=lambda p: (started_at(p), p)), signal.SIGKILL)
            reload_until(page, "ext", "restarting")
            assert "restarting" in page.locator('tr[data-server="ext"]').inner_text()
            reload_until(page, "ext", "up")
            assert page.locator('tr[data-server="ext"] td').nth(2).inner_text() == "1"

            page.get_by_role("button", name="Log in to corp").click()
            page.get_by_role("link", name="Continue to the authorization server").click()
            page.get_by_text("logged in to 'corp'").wait_for()  # (back at the daemon)
            screenshot(page, "logged_in", shots)
            page.get_by_role("link", name="Back to Servers").click()
            page.wait_for_url(re.compile(r"/ui/servers$"))
            reload_until(page, "corp", "up")  # (the supervisor found the login: no restart)
            assert errors == []
    finally:
        idp.terminate()
        idp.wait(timeout=10)
