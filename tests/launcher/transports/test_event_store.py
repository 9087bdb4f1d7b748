"""``transport.event_store``: a client whose SSE stream broke reconnects with ``Last-Event-ID``
and gets what it missed, from fastmcp's EventStore on a real redis-server."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest

from helpers.launch import Launched, http_launcher
from helpers.redis_server import REDIS_SERVER, SKIP_REASON, running_redis
from helpers.rpc import message, open_session, rpc_headers

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)


@pytest.fixture(scope="module")
def resumable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    folder = tmp_path_factory.mktemp("resumable")
    with running_redis(folder) as port:
        config = folder / "tools.yaml"
        config.write_text(
            "transport:\n"
            "  type: http\n"
            f"  event_store: {{url: 'redis://127.0.0.1:{port}/0'}}\n"
            "servers:\n"
            "  stepper:\n"
            "    module: helpers.servers.sample_servers:make_stepper\n",
            encoding="utf-8",
        )
        with http_launcher(config, args=()) as launched:
            yield launched


def _events(response: http.client.HTTPResponse) -> Iterator[dict]:
    """SSE events as they arrive: {"id": ..., "data": ...}."""
    event: dict = {}
    while True:
        line = response.readline()
        if not line:
            return
        text = line.decode().rstrip("\r\n")
        if not text:
            if event:
                yield event
            event = {}
        elif ":" in text:
            name, _, value = text.partition(":")
            event[name] = value.lstrip(" ")


@pytest.mark.slow
def test_a_client_that_lost_its_stream_gets_the_missed_reply_with_last_event_id(
    resumable: Launched,
) -> None:
    port = resumable.port
    session = open_session(port)
    call = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps(message("tools/call", {"name": "steps", "arguments": {"delay": 0.3}}, id=7))
    call.request("POST", "/mcp", body=body, headers=rpc_headers(session))
    response = call.getresponse()
    assert response.status == 200 and response.getheader("content-type", "").startswith(
        "text/event-stream"
    )
    last = None
    for event in _events(response):
        if "id" in event:
            last = event["id"]
        if "notifications/message" in event.get("data", ""):
            break  # the log line arrived; the reply has not: the connection breaks here
    call.close()
    assert last is not None, "no event carried an id: nothing to resume from"

    again = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {**rpc_headers(session), "Last-Event-ID": last}
    del headers["Content-Type"]
    headers["Accept"] = "text/event-stream"
    again.request("GET", "/mcp", headers=headers)
    replayed = again.getresponse()
    assert replayed.status == 200
    for event in _events(replayed):
        data = event.get("data", "")
        if data and json.loads(data).get("id") == 7:
            reply = json.loads(data)
            break
    again.close()
    assert reply["result"]["content"][0]["text"] == "done"
