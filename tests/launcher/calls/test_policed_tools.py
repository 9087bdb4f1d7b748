"""A mounted server's tools under its policy: an unlisted call is observed as a listed one is."""

from __future__ import annotations

from typing import Any

from doc_processing_std_tools.launcher.calls.policed_tools import (
    UNLISTED_LABEL,
    MountRules,
    PolicedListing,
)
from doc_processing_std_tools.launcher.calls.policy import LockMode
from doc_processing_std_tools.telemetry import Telemetry


async def _answer() -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "done"}], "isError": False}


async def test_unlisted_calls_are_counted_under_one_label_per_server() -> None:
    """Metrics see unlisted calls (spans too: same policy), but a client's made-up names share
    the server's one ``(unlisted)`` series instead of adding a series each."""
    telemetry = Telemetry()
    metrics = telemetry.enable_metrics()
    assert metrics is not None
    rules = MountRules(
        server="ev",
        namespace="ev",
        admits=lambda name: True,
        lock_mode=lambda tool: LockMode.NONE,
        timeout=5.0,
        telemetry=telemetry,
    )
    listing = PolicedListing(rules)
    for made_up in ("first", "second"):
        tool = listing.unlisted(made_up)
        assert tool is not None and tool.policy.rules.tool == f"ev_{made_up}"
        await tool.policy.run(_answer)
    rendered = metrics.render()[0].decode()
    assert f'dpt_tool_calls_total{{outcome="ok",server="ev",tool="{UNLISTED_LABEL}"}} 2.0' in (
        rendered
    )
    assert "ev_first" not in rendered and "ev_second" not in rendered


def test_an_unlisted_name_its_rules_leave_out_is_not_asked_of_the_server() -> None:
    """The mount's ``tools:`` rules judge an unlisted name as a listed one (the one place)."""
    rules = MountRules(
        server="ev",
        namespace="ev",
        admits=lambda name: name != "x",
        lock_mode=lambda tool: LockMode.NONE,
        timeout=5.0,
    )
    listing = PolicedListing(rules)
    assert listing.unlisted("x") is None
    assert listing.unlisted("y") is not None
