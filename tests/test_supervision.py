"""Children that misbehave cannot hurt the launcher (issue 26, section 4): real ``dpt-launch``
processes with real children."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import launched, text_of

TESTS = Path(__file__).resolve().parent
SERIAL = TESTS / "serial_child.py"


async def test_a_busy_child_is_not_taken_for_hung_while_its_call_is_within_its_timeout(
    write_config,
) -> None:
    """A child that handles one message at a time answers the health ping only after its call:
    that call, well within its timeout, outlasts the ping limit and still succeeds, on the same
    process."""
    config = write_config(
        f"servers:\n  serial:\n    command: {sys.executable}\n    args: [{SERIAL}]\n"
        "    timeout: 60\n    ping_timeout: 0.5\n"
    )
    async with launched(config) as session:
        before = text_of(await session.call_tool("whoami", {}))
        slow = await session.call_tool("slow", {"seconds": 5})
        assert not slow.is_error, text_of(slow)
        assert text_of(slow) == "done"
        assert text_of(await session.call_tool("whoami", {})) == before
