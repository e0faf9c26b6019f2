"""Concurrency places shared in Redis: leases that expire unless their holder renews them.

One sorted set per limited key (``<prefix><key>:running``) holds the lease ids of the
calls running now, each scored by the moment its lease expires (milliseconds, on
Redis's own clock, ``TIME``, so the workers' clocks need not agree). Three small Lua
scripts keep it, each atomic:

- **take**: drop the expired leases, then add this one if fewer than ``limit`` remain
  (taking a lease that is already held only extends it, so a take whose reply was lost
  can be asked again with the same id without taking two places);
- **renew**: extend the leases still held; one that expired (its holder could not
  reach Redis for a whole lease) is taken again only if there is room;
- **release**: remove leases (a plain ``ZREM``).

A worker killed while it holds places (``kill -9``, a lost machine) stops renewing
them, and the next take after their expiry drops them: the places come back after at
most one lease. The set expires a second after its last lease, so idle keys cost nothing.

**A Redis that lost its record.** A Redis restarted without persistence (or from an old
snapshot, or a replica promoted in its place, or a flushed key) no longer knows who holds
places, while their handlers still run. So beside the set, a small record
(``<set>:epoch``, a hash kept for a day after its last use) says which Redis (``run_id``
of ``INFO server``) wrote it and until when no new place may be given (``until``). Both
scripts read it first (:data:`FENCE`). The holders renew every heartbeat
(:func:`~rabbitq.ratelimit.cap.renew_period`: a third of the lease, at most 2 s), and a
renewal puts back the leases Redis forgot, so no new place is given for two heartbeats
(:data:`FENCE`'s ``beat``, 4 s with the default lease) while they do:

- this Redis started less than two heartbeats ago (a restart, with or without a
  snapshot; or a new Redis, which cannot be told from a restarted one): none until two
  heartbeats after its start. Every holder renews within a heartbeat of it;
- the record was written by another Redis that is not young (a replica promoted): none
  until two heartbeats from now;
- there is no record and a holder renews (the key was flushed or evicted): none until
  two heartbeats from now;
- no record, an older Redis, a take: the key's first use (or its holders are long
  back): nothing to wait for.

Needs the ``redis`` extra; :class:`RedisPlaces` is made by
:meth:`rabbitq.ratelimit.RedisRates.places`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .cap import RENEW_MAX, Unreachable, renew_period

log = logging.getLogger("rabbitq.ratelimit")

# How long the record of which Redis holds a set is kept after its last use (ms).
EPOCH_TTL_MS = 86_400_000

# KEYS[2]: the record. fence(now, lease, renewing) returns the moment (ms, Redis's
# clock) before which no new place may be given, writing the record when it is new.
# ``beat``: two of the holders' heartbeats (renew_period, in ms), the longest a holder
# takes to put its leases back after Redis comes back, with one heartbeat of slack.
FENCE = """
local function fence(now, lease, renewing)
  local ok, info = pcall(redis.call, 'INFO', 'server')
  if not ok or type(info) ~= 'string' then info = '' end  -- INFO refused: flushes only
  local run_id = string.match(info, 'run_id:(%w+)') or '?'
  local uptime = (tonumber(string.match(info, 'uptime_in_seconds:(%d+)')) or 1e9) * 1000
  local record = redis.call('HMGET', KEYS[2], 'run_id', 'until')
  local admit = tonumber(record[2]) or 0
  local beat = 2 * math.min(math.floor(lease / 3), RENEW_MAX_MS)
  if record[1] ~= run_id then
    if uptime < beat then
      admit = now - uptime + beat
    elseif record[1] or renewing then
      admit = now + beat
    else
      admit = 0
    end
    redis.call('HSET', KEYS[2], 'run_id', run_id, 'until', string.format('%d', admit))
  end
  redis.call('PEXPIRE', KEYS[2], EPOCH_TTL_MS)
  return admit
end
""".replace("EPOCH_TTL_MS", str(EPOCH_TTL_MS)).replace("RENEW_MAX_MS", str(round(RENEW_MAX * 1000)))

# KEYS[1]: the set, KEYS[2]: its record. ARGV: limit, lease length (ms), lease id.
# Returns 1 (held), 0 (full) or -1 (none given: Redis may have lost its holders).
TAKE = (
    FENCE
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = now + tonumber(ARGV[2])
local admit = fence(now, tonumber(ARGV[2]), false)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  if now < admit then return -1 end
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
end
redis.call('ZADD', KEYS[1], expires, ARGV[3])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], tonumber(last[2]) - now + 1000)
return 1
"""
)

# KEYS[1]: the set, KEYS[2]: its record. ARGV: limit, lease length (ms), then the
# lease ids to renew.
# A lease still in the set is extended even if it is past its expiry: no take has
# dropped it yet, so no one counted its place as free. Then the expired ones go, and a
# lease that had been dropped is taken again only if there is room. Returns how many
# of the ids are not held. A renewal puts back leases that Redis lost (its record is
# read first, so a lost one starts the wait for new places).
RENEW = (
    FENCE
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = now + tonumber(ARGV[2])
fence(now, tonumber(ARGV[2]), true)
local missing = {}
for i = 3, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], expires, ARGV[i])
  else
    missing[#missing + 1] = ARGV[i]
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local lost = 0
for _, id in ipairs(missing) do
  if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('ZADD', KEYS[1], expires, id)
  else
    lost = lost + 1
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], tonumber(last[2]) - now + 1000)
end
return lost
"""
)


class RedisPlaces:
    """The ``limit`` places of one key in Redis (``name`` is the sorted set), held as
    leases of ``lease`` seconds. A Redis that cannot be reached raises
    :class:`~rabbitq.ratelimit.cap.Unreachable`; other Redis errors propagate."""

    def __init__(self, redis: Any, name: str, *, limit: int, lease: float) -> None:
        from redis.exceptions import ConnectionError, TimeoutError

        self._redis = redis
        self.name = name
        self.epoch = f"{name}:epoch"
        self.limit = limit
        self.lease = lease
        self._lease_ms = max(1, round(lease * 1000))
        self._take: Any = redis.register_script(TAKE)
        self._renew: Any = redis.register_script(RENEW)
        self._down = (ConnectionError, TimeoutError, OSError)
        self._fenced = False  # the last take was refused because Redis lost its record

    async def take(self, lease_id: str) -> bool:
        """Hold a place under ``lease_id`` if one is free (or extend it if held)."""
        try:
            held = int(
                await self._take(
                    keys=[self.name, self.epoch], args=[self.limit, self._lease_ms, lease_id]
                )
            )
        except self._down as exc:
            raise Unreachable(str(exc)) from exc
        if held < 0 and not self._fenced:
            log.warning(
                "Redis may have lost who holds the places of %s (restarted, replaced or "
                "flushed): no new place for up to %gs, while running handlers put theirs back",
                self.name,
                2 * renew_period(self.lease),
            )
        self._fenced = held < 0
        return held > 0

    async def renew(self, lease_ids: Sequence[str]) -> int:
        """Extend these leases for another lease length; return how many are lost."""
        if not lease_ids:
            return 0
        try:
            lost = await self._renew(
                keys=[self.name, self.epoch], args=[self.limit, self._lease_ms, *lease_ids]
            )
        except self._down as exc:
            raise Unreachable(str(exc)) from exc
        return int(lost)

    async def release(self, lease_ids: Sequence[str]) -> None:
        """Give these places back (leases not held are ignored)."""
        if not lease_ids:
            return
        try:
            await self._redis.zrem(self.name, *lease_ids)
        except self._down as exc:
            raise Unreachable(str(exc)) from exc
