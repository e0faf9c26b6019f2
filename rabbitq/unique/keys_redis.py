"""``RedisKeys``: unique and debounce keys in Redis, beside the app's other keys (same
Redis, same key base).

- ``<base>unique:<key>``: the holding message id, expiring when the lease or the window
  ends. Taking it is one script (``SET ... PX`` if absent, else answer the holder):
  of two publishers racing, exactly one takes it.
- ``<base>debounce:<key>``: a hash, ``l`` the burst's latest message, ``p`` the pending
  one with ``pu`` (Redis's clock, ms) the end of its publish's lease; it expires
  ``retention`` after its last publish. Every change and the delivery's check are one
  script each, on the server's clock.
- ``<base>store-epoch``: the store's epoch (:mod:`rabbitq.effects.epoch`). A debounced
  publish's ``propose`` answers it (written if absent) and the message carries it; a
  delivery whose key has no record while the epoch is another one than its publish's
  was lost with the store's data (restarted without persistence), not ended: it runs.

Durable as Redis is: use AOF (docs/control.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, RedisError, TimeoutError

from ..effects import epoch
from ..effects.location import RedisLocation
from ..effects.store import StoreUnavailable
from ..settings import redact_url
from .store import decide

CLIENT_NAME = "rabbitq-keys"
# KEYS[1]; ARGV: message id, ms -> '' (taken) or the holder
_TAKE = """
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ''
end
return v
"""
# KEYS[1]; ARGV: message id, ms
_HOLD = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""
_EPOCH = """
local e = redis.call('GET', KEYS[2])
if not e then
  redis.call('SET', KEYS[2], ARGV[#ARGV])
  e = ARGV[#ARGV]
end
"""
# KEYS[1] the hash, KEYS[2] the epoch; ARGV: message id, lease ms, keep ms, a fresh
# epoch -> the store's epoch
_PROPOSE = (
    _NOW
    + _EPOCH
    + """
redis.call('HSET', KEYS[1], 'p', ARGV[1], 'pu', now + tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return e
"""
)
# KEYS[1] the hash; ARGV: message id, keep ms
_COMMIT = """
redis.call('HSET', KEYS[1], 'l', ARGV[1])
if redis.call('HGET', KEYS[1], 'p') == ARGV[1] then redis.call('HDEL', KEYS[1], 'p', 'pu') end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 0
"""
_WITHDRAW = """
if redis.call('HGET', KEYS[1], 'p') == ARGV[1] then redis.call('HDEL', KEYS[1], 'p', 'pu') end
return 0
"""
# KEYS[1] the hash, KEYS[2] the epoch; ARGV: message id, its publish's epoch ('' none),
# a fresh epoch -> {latest or '', 1 if a newer one is pending, the store's epoch, 1 if
# the record is gone with the store's data}
_CHECK = (
    _NOW
    + _EPOCH
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[2] ~= '' and ARGV[2] ~= e then return {'', 0, e, 1} end
  return {'', 0, e, 0}
end
if redis.call('HGET', KEYS[1], 'p') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'l', ARGV[1])
  redis.call('HDEL', KEYS[1], 'p', 'pu')
end
local l = redis.call('HGET', KEYS[1], 'l') or ''
local pu = tonumber(redis.call('HGET', KEYS[1], 'pu') or '0')
if pu > now then return {l, 1, e, 0} end
return {l, 0, e, 0}
"""
)
_FINISH = (
    _NOW
    + """
if redis.call('HGET', KEYS[1], 'l') ~= ARGV[1] then return 0 end
local pu = tonumber(redis.call('HGET', KEYS[1], 'pu') or '0')
if pu > now then redis.call('HDEL', KEYS[1], 'l') else redis.call('DEL', KEYS[1]) end
return 0
"""
)
_SCRIPTS = (_TAKE, _HOLD, _RELEASE, _PROPOSE, _COMMIT, _WITHDRAW, _CHECK, _FINISH)


class RedisKeys:
    """Unique and debounce keys under ``<base>unique:`` and ``<base>debounce:``."""

    def __init__(self, location: RedisLocation) -> None:
        self.location = location
        self._unique = location.base + "unique:"
        self._debounce = location.base + "debounce:"
        self._keep_ms = int(location.retention * 1000)
        self._client: aioredis.Redis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scripts: dict[str, Any] = {}
        self._epoch = location.base + epoch.EPOCH_KEY
        self.watch = epoch.EpochWatch(repr(self), "debounce records")

    def __repr__(self) -> str:
        where = self.location
        return f"RedisKeys({redact_url(where.url)!r}, key_prefix={where.base!r})"

    async def _call(self, script: str, key: str | list[str], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = aioredis.Redis.from_url(
                self.location.url,
                socket_timeout=self.location.timeout,
                socket_connect_timeout=self.location.timeout,
                client_name=CLIENT_NAME,
                # Each script is idempotent for its message id: sent again once on a
                # new connection after a cut one.
                retry=Retry(ExponentialBackoff(cap=0.5), 2),
                retry_on_error=[ConnectionError, TimeoutError],
            )
            self._loop = loop
            self._scripts = {s: self._client.register_script(s) for s in _SCRIPTS}
        try:
            keys = [key] if isinstance(key, str) else key
            return await self._scripts[script](keys=keys, args=list(args))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc

    async def take(self, key: str, message_id: str, lease: float) -> str | None:
        holder = _text(await self._call(_TAKE, self._unique + key, message_id, _ms(lease)))
        return holder or None

    async def hold(self, key: str, message_id: str, seconds: float) -> None:
        await self._call(_HOLD, self._unique + key, message_id, _ms(seconds))

    async def release(self, key: str, message_id: str) -> None:
        await self._call(_RELEASE, self._unique + key, message_id)

    async def propose(self, key: str, message_id: str, lease: float) -> str:
        keys = [self._debounce + key, self._epoch]
        fresh = epoch.new_epoch()
        now = _text(await self._call(_PROPOSE, keys, message_id, _ms(lease), self._keep_ms, fresh))
        self.watch.saw(now)
        return now

    async def commit(self, key: str, message_id: str) -> None:
        await self._call(_COMMIT, self._debounce + key, message_id, self._keep_ms)

    async def withdraw(self, key: str, message_id: str) -> None:
        await self._call(_WITHDRAW, self._debounce + key, message_id)

    async def check(self, key: str, message_id: str, published_in: str | None = None) -> str:
        keys = [self._debounce + key, self._epoch]
        latest, waiting, now, lost = await self._call(
            _CHECK, keys, message_id, published_in or "", epoch.new_epoch()
        )
        if int(lost):  # the old epoch, then the new one: logged once per change
            self.watch.saw(published_in)
        self.watch.saw(_text(now))
        return decide(_text(latest) or None, bool(int(waiting)), message_id, lost=bool(int(lost)))

    async def finish(self, key: str, message_id: str) -> None:
        await self._call(_FINISH, self._debounce + key, message_id)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value
