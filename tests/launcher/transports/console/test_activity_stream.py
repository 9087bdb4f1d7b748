"""The Activity stream costs nothing unless a page listens: its audit subscription exists only
while the stream is open, and ends when the browser goes away."""

from __future__ import annotations

from typing import Any

import anyio
from starlette.applications import Starlette

from doc_processing_std_tools.launcher.calls.audit import AuditLog
from doc_processing_std_tools.launcher.transports.console.pages import Console
from doc_processing_std_tools.launcher.transports.console.sources import ConsoleSources
from doc_processing_std_tools.launcher.transports.console.visitors import COOKIE
from helpers.waiting import until


async def test_the_subscription_lives_exactly_as_long_as_the_stream() -> None:
    audit = AuditLog(None)
    console = Console(ConsoleSources(states=dict, audit=audit), verifier=None, path="/mcp")
    app = Starlette(routes=console.routes())
    cookie = f"{COOKIE}={console.visitors.anonymous_cookie()}"
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/ui/activity/stream",
        "raw_path": b"/ui/activity/stream",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"cookie", cookie.encode())],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }
    gone = anyio.Event()
    sent: list[dict[str, Any]] = []
    requested: list[bool] = []

    async def receive() -> dict[str, Any]:
        if not requested:
            requested.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    def body() -> bytes:
        return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")

    assert not audit._subscribers  # (no page: no reader, nothing done per call)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(app, scope, receive, send)
            await until(lambda: audit._subscribers, "the stream's subscription")
            audit.write({"tool": "echo", "outcome": "ok"})
            await until(lambda: b'data: {"tool":"echo"' in body(), "the line on the stream")
            gone.set()
    assert sent[0]["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in sent[0]["headers"]
    assert not audit._subscribers
