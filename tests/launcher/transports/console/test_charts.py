"""The Charts' SVG: one line per server and measure, placed on the last 15 minutes."""

from __future__ import annotations

from doc_processing_std_tools.launcher.transports.console.charts import (
    LEFT,
    RIGHT,
    WIDTH,
    charts,
    nice_top,
)
from doc_processing_std_tools.launcher.transports.console.samples import Point


def point(at: float, calls: float, p50: float | None = None) -> Point:
    return Point(at=at, calls=calls, errors=0.0, p50=p50, p99=p50, lock_wait=None)


def test_the_scale_ends_at_one_two_or_five_times_a_power_of_ten() -> None:
    assert [nice_top(v) for v in (0, 0.3, 1, 1.2, 4.3, 7, 130)] == [1, 0.5, 1, 2, 5, 10, 200]


def test_each_server_has_a_line_from_its_points_and_a_legend_entry() -> None:
    now = 1000.0
    series = [
        (now - 900, {"fs": point(now - 900, 1.0, 2.0)}),
        (now - 450, {"fs": point(now - 450, 2.0, None), "echo": point(now - 450, 4.0, 1.0)}),
        (now, {"fs": point(now, 3.0, 5.0), "echo": point(now, 4.0, 1.0)}),
    ]
    calls, latency, lock, errors = charts(series, now)
    fs = [line for line in calls["lines"] if line["server"] == "fs"]
    assert len(fs) == 1 and len(fs[0]["points"].split()) == 3
    first_x = float(fs[0]["points"].split()[0].split(",")[0])
    last_x = float(fs[0]["points"].split()[-1].split(",")[0])
    assert (first_x, last_x) == (LEFT, WIDTH - RIGHT)
    assert [e["server"] for e in calls["legend"]] == ["echo", "fs"]
    assert calls["latest"]["fs"] == {"calls": 3.0}
    # fs had no call in the middle interval: its latency line breaks there (p50 and p99: 2 each)
    assert len([line for line in latency["lines"] if line["server"] == "fs"]) == 4
    assert lock["lines"] == [] and errors["ticks"][-1]["label"] == "1"
