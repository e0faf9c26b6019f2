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

Needs the ``redis`` extra; :class:`RedisPlaces` is made by
:meth:`rabbitq.ratelimit.RedisRates.places`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .cap import Unreachable

# KEYS[1]: the set. ARGV: limit, lease length (ms), lease id. Returns 1 (held) or 0 (full).
TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = now + tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[3])
   and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], expires, ARGV[3])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], tonumber(last[2]) - now + 1000)
return 1
"""

# KEYS[1]: the set. ARGV: limit, lease length (ms), then the lease ids to renew.
# A lease still in the set is extended even if it is past its expiry: no take has
# dropped it yet, so no one counted its place as free. Then the expired ones go, and a
# lease that had been dropped is taken again only if there is room. Returns how many
# of the ids are not held.
RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = now + tonumber(ARGV[2])
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


class RedisPlaces:
    """The ``limit`` places of one key in Redis (``name`` is the sorted set), held as
    leases of ``lease`` seconds. A Redis that cannot be reached raises
    :class:`~rabbitq.ratelimit.cap.Unreachable`; other Redis errors propagate."""

    def __init__(self, redis: Any, name: str, *, limit: int, lease: float) -> None:
        from redis.exceptions import ConnectionError, TimeoutError

        self._redis = redis
        self.name = name
        self.limit = limit
        self.lease = lease
        self._lease_ms = max(1, round(lease * 1000))
        self._take: Any = redis.register_script(TAKE)
        self._renew: Any = redis.register_script(RENEW)
        self._down = (ConnectionError, TimeoutError, OSError)

    async def take(self, lease_id: str) -> bool:
        """Hold a place under ``lease_id`` if one is free (or extend it if held)."""
        try:
            held = await self._take(keys=[self.name], args=[self.limit, self._lease_ms, lease_id])
        except self._down as exc:
            raise Unreachable(str(exc)) from exc
        return bool(int(held))

    async def renew(self, lease_ids: Sequence[str]) -> int:
        """Extend these leases for another lease length; return how many are lost."""
        if not lease_ids:
            return 0
        try:
            lost = await self._renew(
                keys=[self.name], args=[self.limit, self._lease_ms, *lease_ids]
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
