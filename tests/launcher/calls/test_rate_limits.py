"""Rate limits: the buckets (GCRA) in memory and on Redis, the rules' matching, the config's
forms, and the policy's refusal (one line, outcome ``rate_limited``)."""

from __future__ import annotations

import os
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from doc_processing_std_tools.launcher.calls.audit import AuditLog, Caller
from doc_processing_std_tools.launcher.calls.failures import CallFailed
from doc_processing_std_tools.launcher.calls.guards import CallGuards
from doc_processing_std_tools.launcher.calls.policy import CallPolicy, LockMode, ToolRules
from doc_processing_std_tools.launcher.calls.rate_limits import (
    LocalBuckets,
    RateLimited,
    RateLimits,
    Rule,
)
from doc_processing_std_tools.launcher.config.rate_limits import RateLimitRule
from doc_processing_std_tools.launcher.config.schema import LockConfig
from doc_processing_std_tools.telemetry import Outcome


def rule(**settings: Any) -> RateLimitRule:
    return RateLimitRule.model_validate(settings)


def test_rates_and_bursts() -> None:
    assert rule(rate="10/s").per_second == 10 and rule(rate="10/s").capacity == 10
    assert (
        rule(rate="120/min", burst=3).per_second == 2
        and rule(rate="120/min", burst=3).capacity == 3
    )
    assert rule(rate="0.5/h").capacity == 1
    assert rule(rate=4).rate == "4/s"
    assert rule(tools="write_*", rate="1/s").tools == ["write_*"]
    for bad in ("10", "10/day", "-1/s", "x/s", "0/min"):
        with pytest.raises(ValidationError, match="calls per s, min or h"):
            rule(rate=bad)
    with pytest.raises(ValidationError):
        rule(rate="1/s", per="galaxy")


def test_gcra_admits_the_burst_then_the_rate() -> None:
    limit = Rule.of(0, rule(rate="2/s", burst=3))
    buckets = LocalBuckets()
    key = [(limit, "k")]
    assert [buckets.take(key, now=100.0) for _ in range(3)] == [None, None, None]
    refused = buckets.take(key, now=100.0)
    assert refused is not None and refused[1] == pytest.approx(0.5)
    assert buckets.take(key, now=100.49) is not None
    assert buckets.take(key, now=100.5) is None  # one token back after 1/rate
    assert buckets.take(key, now=100.5) is not None
    assert buckets.take(key, now=200.0) is None  # long idle: a full bucket, not more


def test_a_call_takes_from_every_bucket_or_from_none() -> None:
    wide = Rule.of(0, rule(rate="100/s", burst=5))
    narrow = Rule.of(1, rule(rate="1/s", burst=1))
    buckets = LocalBuckets()
    assert buckets.take([(wide, "w"), (narrow, "n")], now=0.0) is None
    refused = buckets.take([(wide, "w"), (narrow, "n")], now=0.0)
    assert refused is not None and refused[0] is narrow
    # the refused call took nothing from the wide bucket: four calls are still there
    assert [buckets.take([(wide, "w")], now=0.0) for _ in range(5)][-1] is not None
    assert [buckets.take([(wide, "w")], now=0.0) is None for _ in range(1)] == [False]


async def admitted(limits: RateLimits, user: str, tool: str) -> bool:
    try:
        await limits.take(user, tool)
    except RateLimited:
        return False
    return True


async def test_rules_match_tools_and_users_and_share_buckets_by_per() -> None:
    limits = RateLimits(
        [
            rule(tools="write_*", users=["alice", "token-*"], rate="1/min", per="user"),
            rule(tools="*", rate="1/min", burst=1, per="tool"),
        ]
    )
    assert limits.applies("write_x") and limits.applies("read")
    assert [r.index for r, _k in limits.buckets("alice", "write_a")] == [0, 1]
    assert [r.index for r, _k in limits.buckets("bob", "write_a")] == [1]
    assert await admitted(limits, "alice", "write_a")
    assert not await admitted(limits, "alice", "write_b")  # (per user: one bucket for both)
    assert await admitted(limits, "bob", "write_b")
    assert not await admitted(limits, "carol", "write_b")  # (per tool: bob and carol share it)
    assert await admitted(limits, "carol", "read")


async def test_the_policy_refuses_in_one_line_counted_as_rate_limited() -> None:
    sink: list[bytes] = []

    class Sink:
        def write(self, data: bytes) -> None:
            sink.append(data)

        def close(self) -> None:
            pass

    guards = CallGuards(
        AuditLog(Sink()),
        RateLimits([rule(tools="srv_*", rate="1/h", burst=1)]),
        identify=lambda session, headers: Caller("alice"),
    )
    policy = CallPolicy(ToolRules("srv", "srv_t", LockMode.NONE, 5), None, guards)
    ran = []

    async def tool() -> str:
        ran.append(1)
        return "ok"

    assert await policy.run(tool) == "ok"
    with pytest.raises(CallFailed) as refused:
        await policy.run(tool)
    assert refused.value.outcome is Outcome.RATE_LIMITED and ran == [1]
    text = str(refused.value)
    assert "\n" not in text and "retry in 3600 s" in text and "rate_limits[0]" in text
    assert [line.count(b'"outcome":"rate_limited"') for line in sink] == [0, 1]


# -- the fleet's buckets, on a real Redis ------------------------------------------------------


def test_rate_limited_is_a_dpt_error() -> None:
    limit = Rule.of(0, rule(rate="1/s"))
    assert "retry in 0.25 s" in str(RateLimited("u", "t", limit, 0.25))


async def test_launchers_share_the_fleets_buckets(redis_url: str) -> None:
    config = LockConfig(url=redis_url, name=f"rl-{os.getpid()}")
    rules = [rule(tools="*", rate="1/h", burst=2)]
    one, two = RateLimits(rules, config), RateLimits(rules, config)
    try:
        await one.take("alice", "t")
        await two.take("alice", "t")
        with pytest.raises(RateLimited) as refused:
            await one.take("alice", "t")
        assert 3500 < refused.value.retry_after <= 3600
        await two.take("bob", "t")  # (per user)
    finally:
        await one.aclose()
        await two.aclose()


async def test_an_unreachable_redis_falls_back_to_local_buckets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limits = RateLimits([rule(rate="1/h", burst=1)], LockConfig(url="redis://127.0.0.1:1"))
    try:
        with anyio.fail_after(10):
            await limits.take("alice", "t")
            with pytest.raises(RateLimited):
                await limits.take("alice", "t")
    finally:
        await limits.aclose()
    assert "limits calls on its own" in caplog.text
