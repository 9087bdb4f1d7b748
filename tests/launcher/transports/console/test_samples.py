"""The Charts' samples: counters read from the metrics registry every 10 s, nothing per call."""

from __future__ import annotations

import pytest

from doc_processing_std_tools.launcher.transports.console.samples import (
    POINTS,
    Sampler,
    quantile,
)
from doc_processing_std_tools.telemetry.metrics import Metrics


def test_a_quantile_is_read_within_its_bucket_as_prometheus_does() -> None:
    buckets = {0.01: 50.0, 0.1: 90.0, 1.0: 100.0, float("inf"): 100.0}
    assert quantile(0.5, buckets) == pytest.approx(0.01)
    assert quantile(0.7, buckets) == pytest.approx(0.01 + 0.09 * 0.5)
    assert quantile(0.99, buckets) == pytest.approx(0.1 + 0.9 * 0.9)
    assert quantile(0.5, {0.1: 0.0, float("inf"): 0.0}) is None
    assert quantile(0.5, {0.1: 0.0, float("inf"): 4.0}) == 0.1  # (past the last bound)


def test_each_interval_gives_each_server_its_rates_latencies_and_lock_wait() -> None:
    metrics = Metrics()
    now = [1000.0]
    sampler = Sampler(lambda: metrics, clock=lambda: now[0])
    sampler.sample()
    for _ in range(18):
        metrics.observe("fs", "read_file", "ok", 0.002, False)
    metrics.observe("fs", "read_file", "tool_error", 0.002, False)
    metrics.observe("fs", "read_file", "ok", 0.8, False)
    metrics.lock_wait.labels("fs").observe(0.004)
    metrics.lock_wait.labels("fs").observe(0.002)
    now[0] += 10
    sampler.sample()
    [(at, by_server)] = sampler.series()
    point = by_server["fs"]
    assert at == 1010.0
    assert (point.calls, point.errors) == (pytest.approx(2.0), pytest.approx(0.1))
    assert point.p50 is not None and 1.0 < point.p50 <= 2.5  # (in the 1-2.5 ms bucket)
    assert point.p99 is not None and 500 < point.p99 <= 1000
    assert point.lock_wait == pytest.approx(3.0)
    now[0] += 10
    sampler.sample()
    quiet = sampler.series()[-1][1]["fs"]
    assert (quiet.calls, quiet.p50, quiet.lock_wait) == (0.0, None, None)


def test_the_series_ends_with_the_interval_since_the_last_sample() -> None:
    metrics = Metrics()
    now = [0.0]
    sampler = Sampler(lambda: metrics, clock=lambda: now[0])
    sampler.sample()
    metrics.observe("echo", "echo", "ok", 0.001, False)
    now[0] = 2.0
    assert sampler.series()[-1][1]["echo"].calls == pytest.approx(0.5)
    assert len(sampler.ring) == 0  # (shown, not kept)


def test_the_ring_keeps_fifteen_minutes_and_nothing_without_metrics() -> None:
    metrics = Metrics()
    now = [0.0]
    sampler = Sampler(lambda: metrics, clock=lambda: now[0])
    for _ in range(POINTS + 20):
        sampler.sample()
        now[0] += 10
    assert len(sampler.ring) == POINTS
    off = Sampler(lambda: None)
    off.sample()
    assert not off.on and off.series() == []
