"""The Prometheus series of one launcher (``GET /metrics``), in a registry of its own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

# Seconds; a tool call takes from ~50 us (a popoto search) to its timeout (60 s by default).
CALL_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
)
LOCK_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60)


class Metrics:
    """The Prometheus series of one launcher, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter(
            "dpt_tool_calls",
            "Tool calls answered, by server, tool and outcome.",
            ("server", "tool", "outcome"),
            registry=self.registry,
        )
        self.duration = Histogram(
            "dpt_tool_call_duration_seconds",
            "Time from a call's arrival at the launcher's rules to its answer.",
            ("server", "tool"),
            buckets=CALL_BUCKETS,
            registry=self.registry,
        )
        self.lock_wait = Histogram(
            "dpt_lock_wait_seconds",
            "Time a call waited for the process lock, by the server of the call.",
            ("server",),
            buckets=LOCK_BUCKETS,
            registry=self.registry,
        )
        self.store_errors = Counter(
            "dpt_store_errors",
            "Calls whose store (memory folder, Redis) failed, by server.",
            ("server",),
            registry=self.registry,
        )
        self.gauges = _Gauges()
        self.registry.register(self.gauges)
        # (server, tool) -> (its duration child, {outcome: its counter child}): labels() is a
        # locked dict look-up and a tuple per call; this is one dict look-up.
        self._children: dict[tuple[str, str], tuple[Any, dict[str, Any]]] = {}

    def observe(
        self, server: str, tool: str, outcome: str, elapsed: float, store_failed: bool
    ) -> None:
        children = self._children.get((server, tool))
        if children is None:
            children = self._children[(server, tool)] = (self.duration.labels(server, tool), {})
        counter = children[1].get(outcome)
        if counter is None:
            counter = children[1][outcome] = self.calls.labels(server, tool, outcome)
        counter.inc()
        children[0].observe(elapsed)
        if store_failed:
            self.store_errors.labels(server).inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


EXTERNAL_STATES = ("starting", "up", "restarting", "failed")


class _Gauges:
    """What is read, not counted: asked of the launcher at each scrape. Each source is set
    by whoever knows it (the composition: external servers; the HTTP transport: sessions and
    connections)."""

    def __init__(self) -> None:
        # each external server's state and restarts, by mount name
        self.states: Callable[[], Mapping[str, str]] = dict
        self.restarts: Callable[[], Mapping[str, int]] = dict
        # each external server's pooled sessions (of single clients or users): (open, max)
        self.pools: Callable[[], Mapping[str, tuple[int, int]]] = dict
        # each per_client command's child started with the launcher for its first client:
        # (waiting now, taken, stopped unused)
        self.early: Callable[[], Mapping[str, tuple[int, int, int]]] = dict
        self.sessions: Callable[[], int] | None = None  # open MCP sessions
        self.connections: Callable[[], int] | None = None  # open HTTP connections
        self.fleet_lock_lost: Callable[[], int] | None = None  # grants lost during a call
        self.pins_drifted: Callable[[], int] | None = None  # definitions not as approved

    def describe(self) -> list[Any]:
        return []  # (collected at scrape time only)

    def collect(self) -> list[Any]:
        state = GaugeMetricFamily(
            "dpt_external_server_state",
            "1 for the state each external server is in, 0 for the others.",
            labels=("server", "state"),
        )
        for server, now in sorted(self.states().items()):
            for name in (*EXTERNAL_STATES, *((now,) if now not in EXTERNAL_STATES else ())):
                state.add_metric((server, name), 1.0 if name == now else 0.0)
        restarts = CounterMetricFamily(
            "dpt_external_server_restarts",
            "Times each external server's session ended and was started again.",
            labels=("server",),
        )
        for server, count in sorted(self.restarts().items()):
            restarts.add_metric((server,), float(count))
        pool_open = GaugeMetricFamily(
            "dpt_external_sessions_open",
            "Sessions each external server has open for single clients or users (its pool).",
            labels=("server",),
        )
        pool_max = GaugeMetricFamily(
            "dpt_external_sessions_max",
            "The most sessions each external server's pool opens (servers.NAME.max_sessions).",
            labels=("server",),
        )
        for server, (opened, most) in sorted(self.pools().items()):
            pool_open.add_metric((server,), float(opened))
            pool_max.add_metric((server,), float(most))
        early_waiting = GaugeMetricFamily(
            "dpt_external_early_children",
            "Children started with the launcher for a server's first client session, not yet "
            "taken (serving HTTP, sessions: per_client).",
            labels=("server",),
        )
        early_taken = CounterMetricFamily(
            "dpt_external_early_children_taken",
            "Children started with the launcher that a first client's session took.",
            labels=("server",),
        )
        early_unused = CounterMetricFamily(
            "dpt_external_early_children_unused",
            "Children started with the launcher that no client took within "
            "servers.NAME.session_idle_timeout (stopped).",
            labels=("server",),
        )
        for server, (waiting, taken, unused) in sorted(self.early().items()):
            early_waiting.add_metric((server,), float(waiting))
            early_taken.add_metric((server,), float(taken))
            early_unused.add_metric((server,), float(unused))
        found = [state, restarts, pool_open, pool_max, early_waiting, early_taken, early_unused]
        if self.sessions is not None:
            found.append(
                GaugeMetricFamily(
                    "dpt_open_sessions", "Open MCP sessions (HTTP).", value=self.sessions()
                )
            )
        if self.connections is not None:
            found.append(
                GaugeMetricFamily(
                    "dpt_open_connections", "Open HTTP connections.", value=self.connections()
                )
            )
        if self.fleet_lock_lost is not None:
            found.append(
                CounterMetricFamily(
                    "dpt_fleet_lock_lost",
                    "Calls during which the fleet lock's lease ran out (lock.lease).",
                    value=self.fleet_lock_lost(),
                )
            )
        if self.pins_drifted is not None:
            found.append(
                GaugeMetricFamily(
                    "dpt_pinned_definitions_drifted",
                    "Tool, prompt and resource template definitions that differ from the lock "
                    "file, are not in it, are gone, or hold hidden text (pins).",
                    value=self.pins_drifted(),
                )
            )
        return found
