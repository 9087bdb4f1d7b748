"""A mounted server's tools under its policy: an unlisted call is observed as a listed one is;
the wraps it keeps stay bounded."""

from __future__ import annotations

import gc
from typing import Any

from fastmcp.tools import Tool

from doc_processing_std_tools.launcher.calls.policed_tools import (
    MIN_WRAPPED,
    UNLISTED_LABEL,
    MountRules,
    PolicedListing,
)
from doc_processing_std_tools.launcher.calls.policy import LockMode
from doc_processing_std_tools.telemetry import Telemetry


async def _answer() -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "done"}], "isError": False}


def _rules(telemetry: Telemetry | None = None) -> MountRules:
    return MountRules(
        server="ev",
        namespace="ev",
        admits=lambda name: True,
        lock_mode=lambda tool: LockMode.NONE,
        timeout=5.0,
        telemetry=telemetry,
    )


async def test_tools_listed_as_the_same_objects_keep_their_wraps() -> None:
    """An in-process server's tools are the same objects on every list and call: one wrap each."""
    listing = PolicedListing(_rules())
    own = [Tool(name=f"own{i}", parameters={"type": "object"}) for i in range(3)]
    first = await listing.list_tools(own)
    for _ in range(200):
        again = await listing.list_tools(own)
        assert all(a is b for a, b in zip(again, first, strict=True))


async def test_tools_made_afresh_on_every_list_are_not_held_by_the_thousand() -> None:
    """A proxy's tools are new objects on every list: their wraps are let go, a bounded few kept."""
    listing = PolicedListing(_rules())
    for _ in range(400):
        await listing.list_tools([Tool(name=f"fresh{i}", parameters={}) for i in range(3)])
    gc.collect()
    held = [o for o in gc.get_objects() if isinstance(o, Tool) and o.name.startswith("fresh")]
    assert len(held) <= 2 * MIN_WRAPPED  # (each held tool and its wrap)


async def test_unlisted_calls_are_counted_under_one_label_per_server() -> None:
    """Metrics see unlisted calls (spans too: same policy), but a client's made-up names share
    the server's one ``(unlisted)`` series instead of adding a series each."""
    telemetry = Telemetry()
    metrics = telemetry.enable_metrics()
    assert metrics is not None
    listing = PolicedListing(_rules(telemetry))
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
