"""``rate_limits:``: token buckets per user and per tool (docs/trust.md#rate-limits)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from .model_base import OneOrMany, StrictModel

RATE_UNITS = {"s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "hour": 3600.0}


class RateLimitRule(StrictModel):
    """One rate limit (``rate_limits:``): a token bucket of *rate* and *burst* for the calls
    whose tool and caller match (docs/trust.md#rate-limits)."""

    tools: OneOrMany = Field(default_factory=lambda: ["*"])  # globs on the names clients see
    users: OneOrMany = Field(default_factory=lambda: ["*"])  # globs on who is calling
    rate: str  # calls per unit: "10/s", "100/min", "1000/h"
    burst: int | None = Field(None, ge=1)  # calls at once (default: the count of rate)
    per: Literal["user", "tool", "user_tool", "everyone"] = "user"  # who shares a bucket

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = f"{value:g}/s"
        if not isinstance(value, str):
            return value
        count, _, unit = value.replace(" ", "").partition("/")
        try:
            calls = float(count)
        except ValueError:
            calls = -1.0
        if calls <= 0 or unit.lower() not in RATE_UNITS:
            raise ValueError("write the rate as calls per s, min or h, e.g. 10/s or 100/min")
        return value

    @property
    def per_second(self) -> float:
        """Calls per second the bucket refills."""
        count, _, unit = self.rate.replace(" ", "").partition("/")
        return float(count) / RATE_UNITS[unit.lower()]

    @property
    def capacity(self) -> int:
        """Calls that may come at once."""
        if self.burst is not None:
            return self.burst
        return max(1, int(float(self.rate.replace(" ", "").partition("/")[0])))
