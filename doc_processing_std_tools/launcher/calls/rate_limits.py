"""Rate limits: token buckets per user and per tool, in the launcher or in the fleet's Redis.

``rate_limits:`` in the config is a list of rules; each rule whose ``tools`` globs match the
exposed tool name and whose ``users`` globs match the caller applies to the call, with a bucket
per user, per tool, per (user, tool) or one for everyone (``per``). A call takes one token from
every bucket that applies, or from none: over any limit, it is answered at once with when to
retry (:class:`RateLimited`), and nothing else is done.

The algorithm is GCRA (the generic cell rate algorithm): a token bucket of ``rate`` and
``burst``, admitting exactly the same calls, kept as one number per bucket, the theoretical
arrival time of the next call (TAT). A call at *now* is admitted when
``max(TAT, now) - now <= (burst - 1) * interval``; it then moves TAT on by one ``interval``
(``1 / rate``). One number, not a count and a timestamp, makes the shared version one read and
one write per bucket, with no floating refill arithmetic that two launchers could disagree on.

Per launcher the buckets are a dict (:class:`LocalBuckets`). With ``lock: {url: ...}`` (the
fleet's Redis) they are Redis keys updated by one Lua script (:class:`RedisBuckets`): atomic,
so launchers behind a load balancer share each user's limit, and timed by Redis's own clock
(``TIME``), so the launchers' clocks need not agree. A key expires when its bucket is full
again. While that Redis cannot be reached, each launcher limits with its own buckets (and says
so once a minute): a limit protects servers from too many calls, and refusing every call while
Redis is down would do the opposite.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass
from fnmatch import fnmatchcase

from ...exceptions import DptError
from ...locking.fleet_lock import client_url, redacted, redis_py
from ...shared.install_hint import install_extra
from ..config.rate_limits import RateLimitRule
from ..config.schema import LockConfig

log = logging.getLogger("dpt-launch")

MAX_LOCAL_BUCKETS = 100_000  # buckets kept in memory before full ones are dropped
MAX_CACHED = 10_000  # (user, tool) pairs whose buckets are remembered
WARN_EVERY = 60.0  # seconds between two warnings about an unusable Redis

# KEYS: the buckets; ARGV: per bucket, its interval and its tolerance, in microseconds.
# Returns 0 (taken from every bucket) or the microseconds to wait (taken from none).
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local wait = 0
local next = {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[2 * i - 1])
  local tolerance = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', key) or now)
  if tat < now then tat = now end
  local over = tat - now - tolerance
  if over > wait then wait = over end
  next[i] = tat + interval
end
if wait > 0 then return math.ceil(wait) end
for i, key in ipairs(KEYS) do
  local ttl = math.ceil((next[i] - now) / 1000) + 1
  redis.call('SET', key, string.format('%.0f', next[i]), 'PX', ttl)
end
return 0
"""


class RateLimitError(DptError):
    """The fleet's limits cannot be set up (redis-py is missing)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``rate_limits`` entry, ready to match and to time."""

    index: int
    tools: tuple[str, ...]
    users: tuple[str, ...]
    interval: float  # seconds between two calls at the steady rate
    tolerance: float  # seconds TAT may run ahead of now: (burst - 1) * interval
    per: str
    tag: str  # names the rule in bucket keys: a hash of its settings, stable across reloads
    text: str  # the rule as written, for the answer

    @classmethod
    def of(cls, index: int, config: RateLimitRule) -> Rule:
        interval = 1.0 / config.per_second
        burst = config.capacity
        settings = f"{config.tools}|{config.users}|{config.rate}|{burst}|{config.per}"
        return cls(
            index,
            tuple(config.tools),
            tuple(config.users),
            interval,
            (burst - 1) * interval,
            config.per,
            hashlib.sha256(settings.encode()).hexdigest()[:12],
            f"{config.rate}, burst {burst}",
        )

    def matches(self, user: str, tool: str) -> bool:
        return any(fnmatchcase(tool, p) for p in self.tools) and any(
            fnmatchcase(user, p) for p in self.users
        )

    def bucket(self, user: str, tool: str) -> str:
        """The key of the bucket this call of *tool* by *user* takes from."""
        part = {
            "user": f"u:{user}",
            "tool": f"t:{tool}",
            "user_tool": f"u:{user}\x00t:{tool}",
            "everyone": "*",
        }[self.per]
        return f"{self.tag}:{part}"


class RateLimited(DptError):
    """A call over a limit: *retry_after* seconds until it would be admitted."""

    def __init__(self, user: str, tool: str, rule: Rule, retry_after: float) -> None:
        self.retry_after = retry_after
        super().__init__(
            f"rate limit: {tool!r} was called too often by {user!r}; retry in "
            f"{_seconds(retry_after)} s (rate_limits[{rule.index}]: {rule.text})"
        )


def _seconds(value: float) -> str:
    """*value* as a reader wants a wait: whole seconds (up) from 10 s, else two decimals."""
    if value >= 10:
        return str(math.ceil(value))
    return f"{max(value, 0.01):.2f}".rstrip("0").rstrip(".")


class LocalBuckets:
    """The buckets of one launcher, in memory (event-loop or any one thread at a time)."""

    def __init__(self) -> None:
        self._tat: dict[str, float] = {}

    def take(
        self, buckets: list[tuple[Rule, str]], now: float | None = None
    ) -> tuple[Rule, float] | None:
        """Take from every bucket, or from none: the rule that refused and the seconds to wait."""
        now = time.monotonic() if now is None else now
        tats = self._tat
        refused: tuple[Rule, float] | None = None
        for rule, key in buckets:
            tat = max(tats.get(key, now), now)
            over = tat - now - rule.tolerance
            if over > 0 and (refused is None or over > refused[1]):
                refused = (rule, over)
        if refused is not None:
            return refused
        for rule, key in buckets:
            tats[key] = max(tats.get(key, now), now) + rule.interval
        if len(tats) > MAX_LOCAL_BUCKETS:
            for key in [k for k, tat in tats.items() if tat <= now]:  # full again: as if new
                del tats[key]
        return None


class RedisBuckets:
    """The fleet's buckets, in the Redis of ``lock:`` under ``{dpt-rate:NAME}`` (one hash tag:
    the script's keys share a slot on Redis Cluster)."""

    def __init__(self, config: LockConfig) -> None:
        redis = redis_py()  # (imported on first use: fleet_lock.redis says why)
        if redis is None:
            raise RateLimitError(
                f"rate_limits with lock.url need redis-py: {install_extra('redis')}"
            )
        import redis.asyncio as redis_asyncio  # (the same: redis-py's asyncio client)

        self.where = redacted(config.url)
        self._prefix = f"{{dpt-rate:{config.name}}}"
        self._redis = redis_asyncio.Redis.from_url(
            client_url(config.url), socket_connect_timeout=2, socket_timeout=2
        )
        self._script = self._redis.register_script(_TAKE)

    async def take(self, buckets: list[tuple[Rule, str]]) -> tuple[Rule, float] | None:
        keys = [f"{self._prefix}:{key}" for _rule, key in buckets]
        args: list[int] = []
        for rule, _key in buckets:
            args += [round(rule.interval * 1e6), round(rule.tolerance * 1e6)]
        wait = int(await self._script(keys=keys, args=args))
        if wait <= 0:
            return None
        # (which rule refused is not told by the script: the one with the longest interval
        # is the likeliest, and the text only names it)
        rule = max((r for r, _k in buckets), key=lambda r: r.interval)
        return rule, wait / 1e6

    async def aclose(self) -> None:
        await self._redis.aclose()


class RateLimits:
    """Every rule of ``rate_limits``, and where their buckets are kept."""

    def __init__(self, rules: list[RateLimitRule], fleet: LockConfig | None = None) -> None:
        self.rules = [Rule.of(i, rule) for i, rule in enumerate(rules)]
        self.local = LocalBuckets()
        self.fleet = RedisBuckets(fleet) if fleet is not None and self.rules else None
        self._by_tool: dict[str, list[Rule]] = {}
        self._buckets: dict[tuple[str, str], list[tuple[Rule, str]]] = {}
        self._warned = 0.0

    def applies(self, tool: str) -> bool:
        """Whether any rule names *tool* (whoever calls it)."""
        return bool(self._rules_of(tool))

    def _rules_of(self, tool: str) -> list[Rule]:
        found = self._by_tool.get(tool)
        if found is None:
            found = [r for r in self.rules if any(fnmatchcase(tool, p) for p in r.tools)]
            if len(self._by_tool) < MAX_CACHED:
                self._by_tool[tool] = found
        return found

    def buckets(self, user: str, tool: str) -> list[tuple[Rule, str]]:
        """The buckets a call of *tool* by *user* takes from."""
        found = self._buckets.get((user, tool))
        if found is None:
            rules = self._rules_of(tool)
            found = [(r, r.bucket(user, tool)) for r in rules if r.matches(user, tool)]
            if len(self._buckets) >= MAX_CACHED:
                self._buckets.clear()
            self._buckets[(user, tool)] = found
        return found

    async def take(self, user: str, tool: str) -> None:
        """Take a token for a call of *tool* by *user*; :class:`RateLimited` when over a limit."""
        buckets = self.buckets(user, tool)
        if not buckets:
            return
        refused = None
        if self.fleet is not None:
            try:
                refused = await self.fleet.take(buckets)
            except redis_py().RedisError as exc:  # (a fleet's buckets imported it)
                self._warn(exc)
                refused = self.local.take(buckets)
        else:
            refused = self.local.take(buckets)
        if refused is not None:
            raise RateLimited(user, tool, *refused)

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._warned > WARN_EVERY:
            self._warned = now
            where = self.fleet.where if self.fleet is not None else "?"
            log.warning(
                "rate limits: the fleet's Redis at %s cannot be used (%s); this launcher "
                "limits calls on its own until it can",
                where,
                " ".join(str(exc).split())[:200] or type(exc).__name__,
            )

    async def aclose(self) -> None:
        if self.fleet is not None:
            await self.fleet.aclose()
