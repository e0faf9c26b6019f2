"""A rate budget and a concurrency cap shared by every process and machine that uses
the same Redis.

The GCRA decision of :mod:`rabbitq.ratelimit.rate` runs as one Lua script, so that
reading and moving a key's arrival time is atomic, and on Redis's own clock
(``TIME``), so that the workers' clocks need not agree. Each key expires once its
budget is full again, so idle keys cost nothing. A handler's ``concurrency`` is kept
in ``"<prefix><key>:running"`` as leases of ``lease`` seconds (:mod:`.lease`).

Needs the ``redis`` extra: ``pip install 'rabbitq[redis]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from .lease import RedisPlaces
from .rate import Rate

if TYPE_CHECKING:
    from redis.asyncio import Redis

DEFAULT_PREFIX = "rabbitq:rate:"

# KEYS[1]: the key. ARGV: emission interval and burst tolerance, in microseconds.
# Returns 0 (start now: the arrival time moved on) or the microseconds to wait before
# asking again (nothing changed). Times are microseconds since the epoch by Redis's
# clock; 2^53 of them is 285 years, so Lua's doubles hold them exactly.
GCRA_CHECK = """
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]))
if tat == nil or tat < now then tat = now end
local early = tat - tolerance - now
if early > 0 then return math.ceil(early) end
local new_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', new_tat),
           'PX', math.floor((new_tat - now) / 1000) + 1000)
return 0
"""


class RedisRates:
    """Rate budgets in Redis, one key per limited handler under ``prefix``.

    Pass a URL (``redis://localhost:6379/0``) or a ``redis.asyncio.Redis`` you own.
    A Redis that cannot be reached for a rate makes the delivery's attempt fail (it is
    retried), never run unlimited; a delivery waiting for a concurrency place keeps
    waiting until Redis answers.

    ``lease`` (seconds, default 30) is how long a concurrency place stays held without
    being renewed: running handlers renew theirs every ``lease / 3`` (at most 2 s), so it only
    matters when a worker dies holding places (``kill -9``): they come back after at
    most ``lease``.
    """

    def __init__(
        self, redis: str | Redis, *, prefix: str = DEFAULT_PREFIX, lease: float = 30.0
    ) -> None:
        if isinstance(lease, bool) or not isinstance(lease, int | float) or not lease >= 0.1:
            raise ConfigurationError(f"lease must be at least 0.1 seconds, not {lease!r}")
        try:
            from redis.asyncio import Redis
        except ImportError as exc:  # the extra is not installed
            raise ConfigurationError(
                "RedisRates needs the redis extra: pip install 'rabbitq[redis]'"
            ) from exc
        self._owned = isinstance(redis, str)
        self._redis: Any = Redis.from_url(redis) if isinstance(redis, str) else redis
        self.prefix = prefix
        self.lease = float(lease)
        self._script: Any = self._redis.register_script(GCRA_CHECK)

    async def acquire(self, key: str, rate: Rate) -> float:
        """Start a call of ``key`` now (0.0), or say how many seconds until asking again."""
        interval = round(rate.interval * 1_000_000)
        tolerance = round(rate.tolerance * 1_000_000)
        waited = await self._script(keys=[self.prefix + key], args=[interval, tolerance])
        return int(waited) / 1_000_000

    def places(self, key: str, limit: int) -> RedisPlaces:
        """The ``limit`` concurrency places of ``key``, in ``"<prefix><key>:running"``."""
        return RedisPlaces(
            self._redis, f"{self.prefix}{key}:running", limit=limit, lease=self.lease
        )

    async def close(self) -> None:
        """Close the connection pool if this object opened it."""
        if self._owned:
            await self._redis.aclose()
