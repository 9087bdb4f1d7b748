"""The upstream OAuth tests' authorization server + protected MCP server (``oauth_server.py``)
and the browser step of ``dpt-launch login``, driven programmatically."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from helpers.paths import SERVERS
from helpers.rpc import request
from helpers.waiting import WAIT, wait_for


def start_oauth_server(folder: Path, token_seconds: int) -> tuple[subprocess.Popen[bytes], str]:
    """``oauth_server.py`` issuing tokens of *token_seconds*: the process and its base URL."""
    port_file = folder / f"oauth-{token_seconds}.port"
    proc = subprocess.Popen(
        [sys.executable, str(SERVERS / "oauth_server.py"), str(port_file), str(token_seconds)],
        stdout=subprocess.DEVNULL,
        stderr=(folder / "oauth-server.log").open("wb"),
    )
    deadline = time.monotonic() + WAIT
    while True:
        assert proc.poll() is None, (folder / "oauth-server.log").read_text()
        assert time.monotonic() < deadline, "the OAuth test server did not start"
        if port_file.exists() and port_file.read_text():
            port = json.loads(port_file.read_text())["port"]
            try:
                if request(port, "GET", "/admin/log").status == 200:
                    return proc, f"http://127.0.0.1:{port}"
            except OSError:
                pass
        time.sleep(0.05)


@contextmanager
def running_oauth_server(folder: Path, token_seconds: int) -> Iterator[str]:
    """:func:`start_oauth_server` for the block: its base URL; stopped at the end."""
    proc, base = start_oauth_server(folder, token_seconds)
    try:
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def server_log(base: str) -> dict[str, Any]:
    """What the server recorded: the calls' tokens, the token requests, the tagged calls."""
    with urllib.request.urlopen(base + "/admin/log", timeout=10) as reply:
        return json.loads(reply.read())


def login_cli_in_process(
    config: Path, name: str, env: dict[str, str], user: str | None = None
) -> tuple[str, str]:
    """``dpt-launch login NAME --no-browser [--user USER]`` run by ``main()`` in a thread of
    this process, the browser being a GET of the URL it prints, following the redirects to the
    callback. Its (stdout, stderr)."""
    import contextlib
    import io
    import threading

    from doc_processing_std_tools.launcher.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    status: list[int] = []
    args = ["login", name, "--config", str(config), "--no-browser"]
    args += ["--user", user] if user is not None else []
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            worker = threading.Thread(target=lambda: status.append(main(args)))
            worker.start()
            wait_for(lambda: "\n" in out.getvalue() or not worker.is_alive(), "the URL")
            url = out.getvalue().partition("\n")[0].strip()
            assert url.startswith("http://127.0.0.1:"), (url, err.getvalue())
            with urllib.request.urlopen(url, timeout=WAIT) as page:  # lands on the callback
                assert page.status == 200
            worker.join(WAIT)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert status == [0], err.getvalue()
    return out.getvalue(), err.getvalue()


async def login_in_process(
    config: Path, name: str, env: dict[str, str], user: str | None = None
) -> None:
    """The login flow of ``dpt-launch login`` in this process (no interpreter to start)."""
    import httpx2

    from doc_processing_std_tools.launcher.config.schema import load_config
    from doc_processing_std_tools.launcher.external.oauth import login as oauth_login
    from doc_processing_std_tools.launcher.external.tokens import TokenStore

    async def browser(url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=True) as client:
            assert (await client.get(url)).status_code == 200

    folder = Path(env["XDG_DATA_HOME"]) / "doc-processing-std-tools" / "oauth"
    entry = load_config(config, {**os.environ, **env}).config.servers[name]
    await oauth_login(name, entry, TokenStore(folder, keyring=None), user, show_url=browser)


def stored(env: dict[str, str], name: str, user: str | None = None) -> dict[str, Any]:
    """The login kept for server *name* (and *user*) in the token store of *env*."""
    from doc_processing_std_tools.launcher.external.tokens import TokenStore

    folder = Path(env["XDG_DATA_HOME"]) / "doc-processing-std-tools" / "oauth"
    record = TokenStore(folder, keyring=None).get(name, user)
    assert record is not None
    return record
