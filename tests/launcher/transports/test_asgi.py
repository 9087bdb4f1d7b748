"""launcher/transports/asgi.py. PostReply: a client that leaves mid-call stops the call's
writer, whether the connection's protocol says so (a callback in the scope) or, under a
server without our protocol, a task waiting on ``receive()`` learns it. Gate: the Host/Origin
guard's remembered verdicts never let a request in that the guard would refuse, and stay few
and small whatever variants the guard lets through."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from fastmcp.server.http import HostOriginGuardMiddleware

from doc_processing_std_tools.launcher.transports.asgi import (
    LOST_SCOPE_KEY,
    VETTED_KEY_BYTES,
    VETTED_MAX,
    Gate,
    InFlight,
    LostConnection,
    PostReply,
)


class Writer:
    """The call's writer: it waits for a reply that never comes, until cancelled."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.cancelled = False

    async def __call__(self) -> None:
        self.started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise


class NoEvents:
    """A request's stream that ends with nothing sent (the writer's reply never comes)."""

    def __aiter__(self) -> NoEvents:
        return self

    async def __anext__(self) -> dict[str, Any]:
        await anyio.sleep_forever()
        raise StopAsyncIteration


async def _nothing_sent(_message: Any) -> None:
    raise AssertionError("nothing is sent to a client that left")


async def test_the_protocols_word_that_the_client_left_stops_the_writer() -> None:
    writer, lost = Writer(), LostConnection()
    scope = {"type": "http", LOST_SCOPE_KEY: lost}

    async def never() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(PostReply(NoEvents(), writer, {}), scope, never, _nothing_sent)
            await writer.started.wait()
            assert len(lost.callbacks) == 1
            lost.lose()  # (as the protocol's connection_lost does)
    assert writer.cancelled and not lost.callbacks


def test_a_watch_registered_after_the_connection_was_lost_is_told_at_once() -> None:
    lost, told = LostConnection(), []
    lost.lose()
    stop = lost.tell(lambda: told.append("left"))
    assert told == ["left"] and not lost.callbacks
    stop()


def test_a_stopped_watch_is_not_told() -> None:
    lost, told = LostConnection(), []
    stop = lost.tell(lambda: told.append("left"))
    stop()
    lost.lose()
    assert not told


async def test_a_writer_started_after_the_connection_was_lost_is_stopped() -> None:
    writer, lost = Writer(), LostConnection()
    lost.lose()  # (between the request's headers and the response's watch)

    async def never() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError

    with anyio.fail_after(10):
        await PostReply(NoEvents(), writer, {})(
            {"type": "http", LOST_SCOPE_KEY: lost}, never, _nothing_sent
        )


async def test_without_the_protocols_word_a_disconnect_from_receive_stops_the_writer() -> None:
    writer, left = Writer(), anyio.Event()

    async def receive() -> dict[str, Any]:
        await left.wait()
        return {"type": "http.disconnect"}

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(
                PostReply(NoEvents(), writer, {}), {"type": "http"}, receive, _nothing_sent
            )
            await writer.started.wait()
            left.set()
    assert writer.cancelled


async def test_a_reply_that_comes_first_is_sent_in_one_json_body() -> None:
    sent: list[Any] = []
    reply = b'{"jsonrpc":"2.0","id":1,"result":{}}'

    class Reply:
        def __aiter__(self) -> Reply:
            return self

        async def __anext__(self) -> dict[str, Any]:
            return {"event": "message", "data": reply.decode()}

    async def send(message: Any) -> None:
        sent.append(message)

    async def done() -> None:
        pass

    headers = {"mcp-session-id": "s", "Content-Type": "text/event-stream"}
    with anyio.fail_after(10):
        await PostReply(Reply(), done, headers)(
            {"type": "http", LOST_SCOPE_KEY: LostConnection()}, None, send
        )  # type: ignore[arg-type]
    assert sent[0]["status"] == 200
    assert (b"content-type", b"application/json") in sent[0]["headers"]
    assert (b"mcp-session-id", b"s") in sent[0]["headers"]
    assert sent[1]["body"] == reply


GATE_CASES = [  # (Host, Origin, status), each asked after the same request with good headers
    (b"evil.example", None, 421),
    (b"127.0.0.1:8000", b"http://evil.example", 403),
    (b"", None, 400),
    (None, None, 400),
    (b"127.0.0.1:8000", b"http://127.0.0.1:8000", 200),
]


@pytest.mark.parametrize(("host", "origin", "status"), GATE_CASES)
async def test_a_remembered_verdict_lets_in_only_what_the_guard_lets_in(
    host: bytes | None, origin: bytes | None, status: int
) -> None:
    served: list[str] = []

    async def app(scope: Any, _receive: Any, send: Any) -> None:
        served.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def guard(inner: Any) -> Any:
        return HostOriginGuardMiddleware(inner, allowed_hosts=[], mode="strict")

    gate = Gate(app, guard=guard, requests=InFlight())

    async def ask(host: bytes | None, origin: bytes | None) -> int:
        # (a list for the address, as Starlette's TestClient gives it)
        return await _status(gate, host, origin, server=["127.0.0.1", 8000])

    assert await ask(b"127.0.0.1:8000", None) == 200  # (its verdict remembered)
    assert await ask(b"127.0.0.1:8000", None) == 200
    assert await ask(host, origin) == status
    assert await ask(host, origin) == status  # (and again, once a verdict may be remembered)
    assert len(served) == 2 + 2 * (status == 200)


def _guarded_gate() -> Gate:
    async def app(_scope: Any, _receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def guard(inner: Any) -> Any:
        return HostOriginGuardMiddleware(inner, allowed_hosts=[], mode="strict")

    return Gate(app, guard=guard, requests=InFlight())


async def _status(
    gate: Gate, host: bytes | None, origin: bytes | None, server: Any = ("127.0.0.1", 8000)
) -> int:
    headers = [(b"host", host)] if host is not None else []
    headers += [(b"origin", origin)] if origin is not None else []
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": headers,
        "server": server,
        "scheme": "http",
    }
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    await gate(scope, receive, send)
    return int(sent[0]["status"])


REAL = (b"localhost:8000", b"http://localhost:8000")


async def test_a_flood_of_accepted_origins_keeps_the_verdicts_few_and_the_real_host_cached() -> (
    None
):
    gate = _guarded_gate()
    for i in range(VETTED_MAX + 50):  # (every loopback Origin passes the guard)
        assert await _status(gate, b"localhost:8000", b"http://localhost/%d" % i) == 200
    assert len(gate.vetted) == VETTED_MAX
    assert await _status(gate, *REAL) == 200
    assert (*REAL, ("127.0.0.1", 8000), "http") in gate.vetted


async def test_a_pass_with_a_long_host_or_origin_is_never_remembered() -> None:
    gate = _guarded_gate()
    junk = b"http://localhost/" + b"x" * VETTED_KEY_BYTES
    for _ in range(3):
        assert await _status(gate, b"localhost:8000", junk) == 200
    assert not gate.vetted


async def test_a_refusal_is_never_remembered() -> None:
    gate = _guarded_gate()
    assert await _status(gate, b"localhost:8000", b"http://evil.example") == 403
    assert await _status(gate, b"evil.example", None) == 421
    assert not gate.vetted
