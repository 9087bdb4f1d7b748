"""The Charts page's numbers: a ring of samples of the launcher's metrics registry (``/metrics``).

Every :data:`PERIOD` seconds the registry's counters are read (one ``collect()``: nothing runs
per tool call) and the difference to the last reading becomes a point per server: calls and
errors per second, the p50 and p99 of the call durations (from the histogram's buckets, as
Prometheus' ``histogram_quantile`` does) and the mean lock wait. :data:`POINTS` points cover the
last 15 minutes. Without metrics (``telemetry.metrics`` off) there is nothing to sample.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio

PERIOD = 10.0  # seconds between samples
POINTS = 90  # 15 minutes of them
OK = "ok"


@dataclass
class Reading:
    """The registry's cumulative counters per server at one time."""

    at: float
    calls: dict[str, float] = field(default_factory=dict)
    errors: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)  # upper bound -> count
    lock_sum: dict[str, float] = field(default_factory=dict)
    lock_count: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Point:
    """One server over one interval ending at *at*."""

    at: float
    calls: float  # per second
    errors: float  # per second
    p50: float | None  # milliseconds (None: no call)
    p99: float | None
    lock_wait: float | None  # mean milliseconds a call waited for the lock (None: none waited)


def read(registry: Any, at: float) -> Reading:
    """The counters of *registry* (a prometheus_client ``CollectorRegistry``) now."""
    reading = Reading(at)
    for family in registry.collect():
        for sample in family.samples:
            server = sample.labels.get("server")
            if server is None:
                continue
            if sample.name == "dpt_tool_calls_total":
                reading.calls[server] = reading.calls.get(server, 0.0) + sample.value
                if sample.labels.get("outcome") != OK:
                    reading.errors[server] = reading.errors.get(server, 0.0) + sample.value
            elif sample.name == "dpt_tool_call_duration_seconds_bucket":
                bound = float(sample.labels["le"])
                buckets = reading.buckets.setdefault(server, {})
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
            elif sample.name == "dpt_lock_wait_seconds_sum":
                reading.lock_sum[server] = sample.value
            elif sample.name == "dpt_lock_wait_seconds_count":
                reading.lock_count[server] = sample.value
    return reading


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The *q* quantile of a histogram's cumulative *buckets* (upper bound -> count), linear
    within the bucket it falls in; None when it counted nothing."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower  # (above the last finite bound: say that bound)
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower


def points(before: Reading, after: Reading) -> dict[str, Point]:
    """Each server's :class:`Point` over the interval between two readings."""
    span = max(after.at - before.at, 1e-6)
    found = {}
    for server in sorted(set(after.calls) | set(after.lock_count)):
        calls = after.calls.get(server, 0.0) - before.calls.get(server, 0.0)
        errors = after.errors.get(server, 0.0) - before.errors.get(server, 0.0)
        was = before.buckets.get(server, {})
        delta = {b: n - was.get(b, 0.0) for b, n in after.buckets.get(server, {}).items()}
        waits = after.lock_count.get(server, 0.0) - before.lock_count.get(server, 0.0)
        waited = after.lock_sum.get(server, 0.0) - before.lock_sum.get(server, 0.0)
        p50, p99 = quantile(0.5, delta), quantile(0.99, delta)
        found[server] = Point(
            at=after.at,
            calls=calls / span,
            errors=errors / span,
            p50=p50 * 1000 if p50 is not None else None,
            p99=p99 * 1000 if p99 is not None else None,
            lock_wait=waited / waits * 1000 if waits > 0 else None,
        )
    return found


class Sampler:
    """Samples the registry *metrics* gives (None: metrics are off) every :data:`PERIOD` s."""

    def __init__(self, metrics: Callable[[], Any], clock: Callable[[], float] = time.time) -> None:
        self.metrics, self.clock = metrics, clock
        self.ring: deque[tuple[float, dict[str, Point]]] = deque(maxlen=POINTS)
        self._last: Reading | None = None

    @property
    def on(self) -> bool:
        return self.metrics() is not None

    def _read(self) -> Reading | None:
        metrics = self.metrics()
        return read(metrics.registry, self.clock()) if metrics is not None else None

    def sample(self) -> None:
        """Take one sample: the interval since the last one joins the ring."""
        reading = self._read()
        if reading is None:
            return
        if self._last is not None:
            self.ring.append((reading.at, points(self._last, reading)))
        self._last = reading

    def series(self) -> list[tuple[float, dict[str, Point]]]:
        """The ring, and the interval since its last sample (so a page shows calls at once)."""
        found = list(self.ring)
        if self._last is not None:
            now = self._read()
            if now is not None and now.at > self._last.at:
                found.append((now.at, points(self._last, now)))
        return found

    async def run(self) -> None:
        """Sample every :data:`PERIOD` seconds until cancelled."""
        while True:
            self.sample()
            await anyio.sleep(PERIOD)


def servers_of(series: Iterable[tuple[float, dict[str, Point]]]) -> list[str]:
    return sorted({server for _, by_server in series for server in by_server})
