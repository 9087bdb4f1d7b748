"""The operator console in tests: a launcher serving it, plain-HTTP sign-in, and a real browser.

The browser is Debian's Chromium driven by Playwright (``.ci/run`` installs ``chromium``;
Playwright's own browser download is not used). Tests that need it are skipped without it.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from helpers.launch import Launched, http_launcher
from helpers.paths import REPO

TOKEN = "console-token-5e1d"
CHROMIUM = os.environ.get("DPT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FORM = "application/x-www-form-urlencoded"
SHOTS = REPO / "docs" / "ui"


def config_text(folder: Path, extra: str = "") -> str:
    """A daemon with a token, an audit log, the echo server and a filesystem server on *folder*."""
    return (
        textwrap.dedent(
            f"""\
        transport:
          type: http
          auth: {{token: ["{TOKEN}"]}}
        audit: {{path: audit.jsonl}}
        servers:
          echo:
            module: helpers.servers.sample_servers:echo_server
          fs:
            server: filesystem
            settings: {{roots: ["{folder}"]}}
        """
        )
        + extra
    )


@contextmanager
def console_launcher(
    folder: Path, text: str | None = None, env: dict[str, str] | None = None
) -> Iterator[Launched]:
    """A ``dpt-launch`` serving the console, on :func:`config_text` (or *text*) in *folder*."""
    path = folder / "tools.yaml"
    path.write_text(text if text is not None else config_text(folder), encoding="utf-8")
    with http_launcher(path, env=env) as launched:
        yield launched


def screenshot(page: Any, name: str, folder: Path) -> None:
    """*page*'s screenshot as ``NAME.png``: in docs/ui/ with ``DPT_UI_SCREENSHOTS=1`` (what
    docs/ui.md shows), else in *folder* (a run leaves the tree as it was)."""
    target = SHOTS if os.environ.get("DPT_UI_SCREENSHOTS") == "1" else folder
    target.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target / f"{name}.png"), full_page=True)


# Run in the page by Playwright (CDP, not subject to the page's CSP): what a person cannot use.
UNLABELLED = """() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
  .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                  && !(el.tagName === 'BUTTON' && el.textContent.trim()))
  .map((el) => el.outerHTML)"""
OVERFLOW = """() => {
  const main = document.querySelector('main');
  return {page: document.documentElement.scrollWidth - window.innerWidth,
          main: main.scrollWidth - main.clientWidth};
}"""


def tab_to(page: Any, accessible: str, limit: int = 40) -> bool:
    """Whether pressing Tab from the top of *page* reaches the control named *accessible* (its
    label's text, or its own text), leaving the focus there."""
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    for _ in range(limit):
        page.keyboard.press("Tab")
        name = page.evaluate(
            """() => { const el = document.activeElement; if (!el) return '';
                 const label = el.labels && el.labels.length ? el.labels[0].textContent : '';
                 return (el.getAttribute('aria-label') || label || el.textContent || '').trim(); }"""
        )
        if " ".join(name.rstrip("*").split()) == accessible:  # (a required field's label ends in *)
            return True
    return False


def post(
    port: int, path: str, fields: dict[str, str], headers: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    """A form POST to the daemon on *port* (the response read, its body in ``.text``)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request(
        "POST", path, body=urlencode(fields), headers={"content-type": FORM, **(headers or {})}
    )
    response = connection.getresponse()
    response.text = response.read().decode()  # type: ignore[attr-defined]
    connection.close()
    return response


def get(port: int, path: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", path, headers=headers or {})
    response = connection.getresponse()
    response.text = response.read().decode()  # type: ignore[attr-defined]
    connection.close()
    return response


def origin(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def signed_in_cookie(port: int) -> str:
    """The console cookie (``name=value``) of a plain-HTTP sign-in with :data:`TOKEN`."""
    response = post(port, "/ui/signin", {"token": TOKEN}, {"origin": origin(port)})
    assert response.status == 303, response.text  # type: ignore[attr-defined]
    return str(response.getheader("set-cookie")).split(";")[0]


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found, page
    return found.group(1)


@contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium (Playwright), or the test is skipped when there is none."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    args = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            yield chromium
        finally:
            chromium.close()
