"""The console in a real browser (Chromium through Playwright) against a real ``dpt-launch``:
sign in, see the servers, run a tool from its generated form, watch the call appear in Activity,
approve a drifted pin. Each page's screenshot goes to docs/ui/ (docs/ui.md shows them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from doc_processing_std_tools.launcher.calls.pins import LockFile
from doc_processing_std_tools.launcher.cli.main import main
from helpers.console import TOKEN, browser, config_text, console_launcher
from helpers.paths import REPO

SHOTS = REPO / "docs" / "ui"
TIMEOUT_MS = 30_000
APPROVED = "Approved text that the server no longer serves."


def drifted_lock(folder: Path) -> Path:
    """The lock file of every served definition, but for one description (a drift)."""
    config = folder / "tools.yaml"
    config.write_text(config_text(folder), encoding="utf-8")
    assert main(["pin", "--config", str(config)]) == 0
    lock = folder / "tools.lock"
    pins = LockFile.read(lock)
    pins.servers["fs"]["tools"]["create_directory"]["description"] = APPROVED
    pins.write(lock)
    return lock


@pytest.mark.slow
def test_sign_in_see_servers_run_a_tool_watch_activity_and_approve_a_pin(tmp_path: Path) -> None:
    lock = drifted_lock(tmp_path)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with console_launcher(tmp_path, config_text(tmp_path)) as daemon, browser() as chromium:
        base = f"http://127.0.0.1:{daemon.port}"
        context = chromium.new_context(viewport={"width": 1280, "height": 800})
        context.set_default_timeout(TIMEOUT_MS)
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

        page.goto(f"{base}/ui")
        assert page.url.endswith("/ui/signin")
        page.get_by_label("Token").fill(TOKEN)
        page.screenshot(path=str(SHOTS / "signin.png"))
        page.get_by_role("button", name="Sign in").click()

        page.wait_for_url(re.compile(r"/ui/servers$"))
        for server in ("echo", "fs"):
            row = page.locator(f'tr[data-server="{server}"]')
            assert row.locator(".state").inner_text() == "up"
        page.screenshot(path=str(SHOTS / "servers.png"), full_page=True)

        # Activity listens in a tab of its own before the call is made.
        activity = context.new_page()
        activity.goto(f"{base}/ui/activity")
        activity.get_by_text("Live:").wait_for()

        page.get_by_role("link", name="Tools").click()
        page.get_by_role("link", name="echo", exact=True).wait_for()
        assert page.get_by_role("link", name="create_directory").count() == 0  # (drifted)
        page.screenshot(path=str(SHOTS / "tools.png"), full_page=True)
        page.get_by_role("link", name="echo", exact=True).click()
        page.get_by_label("text").fill("hello from the browser")
        page.get_by_role("button", name="Call echo").click()
        result = page.locator("section.result pre.output").first
        assert result.inner_text() == "hello from the browser"
        page.screenshot(path=str(SHOTS / "tool.png"), full_page=True)

        row = activity.locator("#activity tbody tr").filter(has_text="echo")
        row.wait_for()
        assert "token-1" in row.inner_text() and "ok" in row.inner_text()
        activity.screenshot(path=str(SHOTS / "activity.png"), full_page=True)
        activity.close()  # (its audit subscription ends with the stream)

        page.get_by_role("link", name="Pins").click()
        drift = page.locator("section.drift").filter(has_text="fs.create_directory")
        assert "changed" in drift.inner_text() and APPROVED in drift.inner_text()
        page.screenshot(path=str(SHOTS / "pins.png"), full_page=True)
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
        context.close()
