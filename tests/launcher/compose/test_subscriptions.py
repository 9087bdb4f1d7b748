"""``resources/subscribe`` to an external server's resource works as with the server alone
(issue 26 §1): the subscription reaches the server under its own URI, its
``notifications/resources/updated`` reaches the subscribed client under the URI the client
used, and ``resources/unsubscribe`` reaches it too. An unknown URI is refused with a reason.
"""

from __future__ import annotations

import sys

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from helpers.launch import launched, text_of
from helpers.paths import SERVERS

CHILD = SERVERS / "subscribing_child.py"
UPDATED = "notifications/resources/updated"


class Updates:
    """The URIs of the ``resources/updated`` notifications the client received."""

    def __init__(self) -> None:
        self.uris: list[str] = []

    async def __call__(self, message: object) -> None:
        note = getattr(message, "root", message)
        if getattr(note, "method", None) == UPDATED:
            self.uris.append(str(note.params.uri))  # type: ignore[attr-defined]


@pytest.mark.slow  # a launcher of its own; the HTTP forwarding test covers this in the default run
async def test_a_subscription_reaches_the_server_and_its_updates_reach_the_client(
    write_config,
) -> None:
    config = write_config(
        f"servers:\n  notes:\n    command: {sys.executable}\n    args: [{CHILD}]\n"
        "    namespace: notes\n"
    )
    updates = Updates()
    async with launched(config, message_handler=updates) as session:
        uris = [str(r.uri) for r in (await session.list_resources()).resources]
        assert uris == ["note://notes/a"]
        exposed = uris[0]
        await session.subscribe_resource(exposed)
        assert text_of(await session.call_tool("notes_touch", {})) == "subscribed: note://a"
        with anyio.fail_after(30):
            while not updates.uris:
                await anyio.sleep(0.02)
        assert updates.uris == [exposed]
        read = await session.read_resource(exposed)
        assert read.contents[0].text == "version 1"  # type: ignore[union-attr]

        await session.unsubscribe_resource(exposed)
        assert text_of(await session.call_tool("notes_touch", {})) == "subscribed: "

        with pytest.raises(MCPError, match="unknown resource 'note://nobody/x'"):
            await session.subscribe_resource("note://nobody/x")
    assert updates.uris == [exposed]
