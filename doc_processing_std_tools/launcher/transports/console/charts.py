"""The Charts page's SVG, drawn by the server from :mod:`.samples` (no script, no library): one
chart per measure, one line per server over the last 15 minutes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .samples import PERIOD, POINTS, Point, servers_of

WIDTH, HEIGHT = 640, 170  # the drawing's user units (it scales to the page's width)
LEFT, RIGHT, TOP, BOTTOM = 52, 8, 10, 22  # margins for the axes' labels
WINDOW = PERIOD * POINTS  # seconds shown
# Colours a reader tells apart (Okabe & Ito's palette), each line also named in the legend.
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")

Series = Sequence[tuple[float, dict[str, Point]]]


@dataclass(frozen=True)
class Measure:
    title: str
    unit: str
    value: Callable[[Point], float | None]
    dashed: bool = False


MEASURES: tuple[tuple[str, tuple[Measure, ...]], ...] = (
    ("Calls per second", (Measure("calls", "/s", lambda p: p.calls),)),
    (
        "Latency p50 and p99 (ms)",
        (
            Measure("p50", "ms", lambda p: p.p50),
            Measure("p99", "ms", lambda p: p.p99, dashed=True),
        ),
    ),
    ("Lock wait, mean per call (ms)", (Measure("lock wait", "ms", lambda p: p.lock_wait),)),
    ("Errors per second", (Measure("errors", "/s", lambda p: p.errors),)),
)


def nice_top(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above *value* (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return float(next(step * power for step in (1, 2, 5, 10) if step * power >= value))


def _before(xy: str) -> str:
    """A point a little left of *xy*: a line of one point is drawn as a short dash."""
    x, y = xy.split(",")
    return f"{float(x) - 4:.1f},{y}"


def _label(value: float) -> str:
    return f"{value:.3g}"


def chart(
    title: str, measures: Sequence[Measure], series: Series, servers: Sequence[str], now: float
) -> dict[str, Any]:
    """One chart's drawing: the lines' point lists, the axes' ticks and the legend (a line and a
    colour for each of *servers*, the servers of *series*)."""
    values = [
        v
        for _, by_server in series
        for point in by_server.values()
        for m in measures
        if (v := m.value(point)) is not None
    ]
    top = nice_top(max(values, default=0.0))
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def xy(at: float, value: float) -> str:
        x = LEFT + inner_w * (1 - min(max(now - at, 0.0), WINDOW) / WINDOW)
        y = TOP + inner_h * (1 - min(value, top) / top)
        return f"{x:.1f},{y:.1f}"

    lines: list[dict[str, Any]] = []
    for i, server in enumerate(servers):
        for measure in measures:
            segments: list[list[str]] = [[]]
            for at, by_server in series:
                if now - at > WINDOW:
                    continue
                point = by_server.get(server)
                value = measure.value(point) if point is not None else None
                if value is None:
                    if segments[-1]:
                        segments.append([])
                    continue
                segments[-1].append(xy(at, value))
            lines.extend(
                {
                    "points": " ".join(s if len(s) > 1 else [_before(s[0]), s[0]]),
                    "colour": COLOURS[i % len(COLOURS)],
                    "dashed": measure.dashed,
                    "server": server,
                }
                for s in segments
                if s
            )
    ticks = [{"y": TOP + inner_h * (1 - f), "label": _label(top * f)} for f in (0.0, 0.5, 1.0)]
    legend = [{"server": s, "colour": COLOURS[i % len(COLOURS)]} for i, s in enumerate(servers)]
    latest = {
        server: {m.title: m.value(by_server[server]) for m in measures}
        for _, by_server in series[-1:]
        for server in by_server
    }
    return {
        "title": title,
        "measures": [m.title for m in measures],
        "lines": lines,
        "ticks": ticks,
        "legend": legend,
        "latest": latest,
        "left": LEFT,
        "right": WIDTH - RIGHT,
        "bottom": HEIGHT - BOTTOM,
    }


def charts(series: Series, now: float) -> list[dict[str, Any]]:
    """Every chart of the page (the same servers, in the same colours, on each)."""
    servers = servers_of(series)
    return [chart(title, measures, series, servers, now) for title, measures in MEASURES]
