"""A lock for a fleet of launchers: one Redis (or Valkey) key, a lease, and a FIFO queue.

``lock: {url: redis://..., name: team-a}`` in the launcher's config installs one
:class:`FleetLock` (:func:`doc_processing_std_tools.locking.use_fleet_lock`); every holder of
:data:`~doc_processing_std_tools.locking.PROCESS_LOCK` then takes it too, after the process
lock, so at most one waiter per process is ever queued here.

The algorithm (three short Lua scripts, so each step is atomic on the server; every key
shares the hash tag ``{dpt-lock:NAME}``, so it runs on Redis Cluster too):

* ``…:owner`` holds the holder's random token with a lease (``PX``): a holder that dies
  (SIGKILL, lost machine) frees the lock when the lease ends; a live holder renews it every
  third of the lease from a background thread, for as long as its call runs.
* ``…:queue`` is a sorted set of waiting tokens scored by a ticket from ``…:seq`` (``INCR``):
  only the oldest waiter may take a free lock, so launchers are served first come first
  served and none starves. ``…:beats`` scores each waiter by when it stops counting as alive
  (Redis ``TIME``, so no clocks need to agree); a waiter whose process died leaves the queue
  after :data:`WAITER_TTL` seconds instead of blocking it.
* Releasing deletes the key only if it still holds the holder's token, and publishes on
  ``…:free``; waiters wake on that message, and poll every :data:`POLL` seconds in case it is
  lost or a lease expired. A release that finds the token gone, like a renewal that does,
  means the lease ran out during the call: :class:`FleetLockLost`, an ERROR line, and the
  call answers so.
* Every grant carries a **fencing number** from ``…:fence`` (``INCR``), which only grows: the
  holder passes it on (:data:`~.process_lock.CURRENT_FENCE`; relayed calls carry it in
  ``_meta`` as :data:`FENCE_META_KEY`), so a store that checks it refuses a write from a
  holder whose grant was superseded (memory-tools' Redis store does). The counter starts from
  Redis's clock in microseconds, so numbers keep growing across a Redis that lost its data.
* A Redis that lost the lock's state (a restart without persistence) grants nothing for one
  lease after it is first asked again (``…:quiet``), so a holder from before either finishes
  or finds out first. The state counts as lost when ``…:fence`` is missing on a Redis that has
  run for less than a lease (:meth:`FleetLock.acquire` asks ``INFO`` then, once).

Why not redis-py's ``Lock``: it has the lease and the token check, but waiters poll with a
sleep and the one that polls first wins, so a busy launcher can starve another; the queue
here is the part it lacks. Like every lease lock, it cannot stop a holder that is paused past
its lease (a stopped VM) from going on after the lease ended: fencing numbers make stores that
check them refuse such a holder's writes; for the others the lease must be longer than any
pause.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..exceptions import DptError
from ..shared.install_hint import install_extra
from .process_lock import LockWaitTimeout

# redis-py (the redis extra), imported by the first FleetLock: at module level it cost every
# launcher's start 0.1 s (python -X importtime), configured with lock: or not.
redis: Any = None

log = logging.getLogger("dpt-launch")

POLL = 0.25  # seconds between tries when no release message arrives
WAITER_TTL = 3.0  # seconds a waiter that stopped trying keeps its place in the queue
DEFAULT_LEASE = 10.0

_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[5]) == 0 then
  if ARGV[4] == '?' then return -1 end
  redis.call('SET', KEYS[5], now * 1000)
  if ARGV[4] == '1' then redis.call('SET', KEYS[6], '1', 'PX', ARGV[2]) end
end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do
  redis.call('ZREM', KEYS[2], gone)
  redis.call('ZREM', KEYS[4], gone)
end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[1])
end
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[3]), ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[6]) == 1 then return 0 end
local head = redis.call('ZRANGE', KEYS[2], 0, 0)
if head[1] ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return redis.call('INCR', KEYS[5])
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_WITHDRAW = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 0 then redis.call('PUBLISH', ARGV[2], '1') end
return 1
"""


FENCE_META_KEY = "dpt-launch/fence"  # a relayed call's _meta: the fencing number of its grant


class FleetLockUnavailable(DptError):
    """The lock's Redis could not be reached (or refused us); nothing was done."""


class FleetLockLost(DptError):
    """The lock was not held until the end of a call (its lease ran out, or its Redis lost it):
    another launcher may have run a call at the same time."""


class _Cancelled(DptError):
    """An async wait was cancelled: the lock was not taken (or was given back)."""


def redacted(url: str) -> str:
    """*url* without its password (for messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username
    return urlunsplit(parts._replace(netloc=f"{user + ':' if user else ''}***@{netloc}"))


def client_url(url: str) -> str:
    """The URL redis-py understands (``valkey://`` is ``redis://``, ``valkeys://`` is ``rediss://``)."""
    for ours, theirs in (("valkeys://", "rediss://"), ("valkey://", "redis://")):
        if url.startswith(ours):
            return theirs + url[len(ours) :]
    return url


def redis_py() -> Any:
    """redis-py, imported on first use; None without the redis extra."""
    global redis
    if redis is None:
        with contextlib.suppress(ImportError):
            import redis as module  # (see the note at ``redis`` above)

            redis = module
    return redis


class FleetLock:
    """The fleet-wide lock named *name* on the Redis at *url*, held with a *lease* in seconds.

    Blocking methods run in worker threads; :meth:`acquire_async` waits on the event loop
    while one thread of its own talks to Redis (taken in turn: one waiter per process).
    """

    def __init__(self, url: str, name: str, lease: float = DEFAULT_LEASE) -> None:
        if redis_py() is None:
            raise FleetLockUnavailable(f"lock.url needs redis-py: {install_extra('redis')}")
        self.url, self.name, self.lease = url, name, lease
        tag = f"{{dpt-lock:{name}}}"
        self._keys = [f"{tag}:owner", f"{tag}:queue", f"{tag}:seq", f"{tag}:beats"]
        # the last grant's fencing number: a store on this Redis compares a writer's with it
        self.fence_key = f"{tag}:fence"
        self._acquire_keys = [*self._keys, self.fence_key, f"{tag}:quiet"]
        self._channel = f"{tag}:free"
        self._redis = redis.Redis.from_url(
            client_url(url), socket_connect_timeout=2, socket_timeout=5, health_check_interval=10
        )
        self._acquire_script = self._redis.register_script(_ACQUIRE)
        self._release_script = self._redis.register_script(_RELEASE)
        self._renew_script = self._redis.register_script(_RENEW)
        self._withdraw_script = self._redis.register_script(_WITHDRAW)
        self._token: str | None = None  # the token held by this process, if any
        self.fence: int | None = None  # the fencing number of the grant held, if any
        self._lost = False  # the lease of the grant held ran out (found by the renewal)
        self.lost_count = 0  # grants lost during a call, since start (dpt_fleet_lock_lost_total)
        self._state = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fleet-lock")
        self._executor_thread: threading.Thread | None = None
        self._listener: threading.Thread | None = None
        self._renewer = threading.Thread(
            target=self._renew_loop, name="fleet-lock-renew", daemon=True
        )
        self._renewer.start()

    # -- taking and giving back --------------------------------------------------------

    def acquire(self, deadline: float | None, cancel: threading.Event | None = None) -> int:
        """Wait in the queue until held; the grant's fencing number.
        :class:`~.process_lock.LockWaitTimeout` at *deadline* (a ``time.monotonic()`` value),
        :class:`FleetLockUnavailable` when Redis cannot be reached."""
        self._listen()
        token = uuid.uuid4().hex
        lease_ms, beat_ms = int(self.lease * 1000), int(WAITER_TTL * 1000)
        young = "?"  # whether Redis started less than a lease ago: asked only when state is new
        try:
            while True:
                self._wake.clear()
                args: list[str | int] = [token, lease_ms, beat_ms, young]
                granted = self._acquire_script(keys=self._acquire_keys, args=args)
                if granted == -1:
                    young = "1" if self._redis_is_young() else "0"
                    continue
                if granted:
                    with self._state:
                        self._token, self.fence, self._lost = token, int(granted), False
                    if cancel is not None and cancel.is_set():
                        self.release_now()
                        raise _Cancelled
                    return int(granted)
                if cancel is not None and cancel.is_set():
                    self._withdraw(token)
                    raise _Cancelled
                wait = POLL
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._withdraw(token)
                        raise LockWaitTimeout(
                            f"the fleet lock {self.name!r} stayed taken until the call's timeout"
                        )
                    wait = min(wait, left)
                self._wake.wait(wait)
        except redis.RedisError as exc:
            raise FleetLockUnavailable(self._unreachable(exc)) from None

    def _redis_is_young(self) -> bool:
        """Whether the lock's Redis started less than a lease ago (``INFO server``): a missing
        fencing counter then means it lost the lock's state, not that the lock is new."""
        info = self._redis.info("server")
        return float(info.get("uptime_in_seconds", 0)) < self.lease

    async def acquire_async(self, deadline: float | None) -> int:
        """:meth:`acquire` from the event loop; a cancelled wait leaves the lock untaken."""
        cancel = threading.Event()
        future = self._executor.submit(self._in_executor, self.acquire, deadline, cancel)
        try:
            return int(await asyncio.wrap_future(future))
        except BaseException:
            cancel.set()
            self._wake.set()  # the wait in the lock's thread ends now, not at its next poll
            # (done callbacks run in the executor's thread: the lock is given back before
            # it takes the next waiter's turn)
            future.add_done_callback(self._give_back_if_taken)
            raise

    def _give_back_if_taken(self, future: concurrent.futures.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.release_now()

    def _in_executor(self, fn: Any, *args: Any) -> Any:
        self._executor_thread = threading.current_thread()
        return fn(*args)

    def release(self) -> None:
        """Give the lock back without waiting for the answer (a call cut short): done in this
        lock's own thread, before any later :meth:`acquire_async` of this process."""
        if threading.current_thread() is self._executor_thread:
            self.release_now()
        else:
            self._executor.submit(self.release_now)

    async def release_async(self) -> None:
        """Give the lock back at the end of a call, from the event loop;
        :class:`FleetLockLost` when it was no longer held."""
        held = await asyncio.wrap_future(self._executor.submit(self.release_now))
        if not held:
            raise FleetLockLost(self.lost_text())

    def release_checked(self) -> None:
        """:meth:`release_now` from a worker thread; :class:`FleetLockLost` when it was lost."""
        if not self.release_now():
            raise FleetLockLost(self.lost_text())

    def release_now(self) -> bool:
        """Give the lock back (blocking). False when it was lost before (its lease ran out, or
        its Redis lost it): logged as an ERROR. A Redis that cannot be reached frees it by the
        lease."""
        with self._state:
            token, self._token, self.fence = self._token, None, None
            lost, self._lost = self._lost, False
        if token is None:
            return True
        try:
            released = self._release_script(keys=[self._keys[0]], args=[token, self._channel])
        except redis.RedisError as exc:
            log.warning(
                "could not release the fleet lock %r (%s); it frees itself within %g s",
                self.name,
                _reason(exc),
                self.lease,
            )
            return not lost
        if released and not lost:
            return True
        self.lost_count += 1
        log.error("%s", self.lost_text())
        return False

    def lost_text(self) -> str:
        return (
            f"the fleet lock {self.name!r} was lost during this call (its lease of "
            f"{self.lease:g} s ran out, or its Redis lost it): another launcher may have run a "
            "call at the same time; check the result before relying on it (raise lock.lease)"
        )

    def superseded_text(self) -> str:
        """What a store that checked the fencing number answers when it refused a write."""
        return (
            f"the fleet lock {self.name!r} was lost before this change was written (its lease "
            f"of {self.lease:g} s ran out and another launcher took the lock): nothing was "
            "written; try again (raise lock.lease if calls take longer)"
        )

    def _withdraw(self, token: str) -> None:
        with contextlib.suppress(redis.RedisError):  # (else the waiter's heartbeat expires)
            self._withdraw_script(
                keys=[self._keys[1], self._keys[3], self._keys[0]], args=[token, self._channel]
            )

    # -- background: the lease and the wake-ups -------------------------------------------

    def _renew_loop(self) -> None:
        while not self._closed.wait(self.lease / 3):
            with self._state:
                token = self._token
            if token is None:
                continue
            try:
                kept = self._renew_script(
                    keys=[self._keys[0]], args=[token, int(self.lease * 1000)]
                )
            except redis.RedisError as exc:
                log.error("could not renew the fleet lock %r: %s", self.name, _reason(exc))
                continue
            with self._state:
                if not kept and self._token == token:
                    self._lost = True

    def _listen(self) -> None:
        """Start the thread that wakes a waiter when the lock is released (once)."""
        if self._listener is None:
            self._listener = threading.Thread(
                target=self._listen_loop, name="fleet-lock-listen", daemon=True
            )
            self._listener.start()

    def _listen_loop(self) -> None:
        while not self._closed.is_set():
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self._channel)
                while not self._closed.is_set():
                    if pubsub.get_message(timeout=1.0) is not None:
                        self._wake.set()
            except Exception:  # Redis gone: waiters poll meanwhile
                self._closed.wait(1.0)
            finally:
                with contextlib.suppress(Exception):
                    pubsub.close()

    def problem(self) -> str | None:
        """Why the lock cannot be taken now (Redis unreachable, a wrong password), or None."""
        try:
            self._redis.ping()
        except redis.RedisError as exc:
            return self._unreachable(exc)
        return None

    def close(self) -> None:
        """Give back what is held and stop the background threads."""
        self._closed.set()
        self.release_now()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._redis.close()

    def _unreachable(self, exc: Exception) -> str:
        return (
            f"the fleet lock's Redis at {redacted(self.url)} (lock.url) cannot be used: "
            f"{_reason(exc)}; nothing was done; start Redis there or fix lock.url"
        )


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
    return text[:300]
