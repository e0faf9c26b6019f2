"""``RedisChords``: chord state in Redis, beside a :class:`~rabbitq.status.RedisStatus`.

- ``<prefix>chord:<group_id>``: a hash, member index -> its ``message_id``. ``mark`` is
  one script: ``HSET``, ``PEXPIRE``, ``HLEN`` (atomic, so the last member's mark sees
  the chord complete);
- ``<prefix>claim:<group_id>:<kind>``: ``busy:<token>`` with the lease's expiry, then
  ``sent`` for the retention; the claim is one script (take it if absent or ours, else
  say whose it is); ``<prefix>claim:<group_id>:shape``: what the id names (``SET NX``);
- ``<prefix>result:<message_id>``: the result's JSON.

Every key expires ``retention`` after its last write. Durable as Redis is: use AOF.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, RedisError, TimeoutError

from ..effects.location import CHORD_KEYS, RedisLocation
from ..effects.redisclient import new_client
from ..effects.store import StoreUnavailable
from ..settings import redact_url
from .wire import SHAPE

CLIENT_NAME = "rabbitq-workflow"
# KEYS[1] the hash; ARGV: index, message_id, retention ms -> members done
_MARK = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return redis.call('HLEN', KEYS[1])
"""
# KEYS[1] the claim; ARGV: token ("<index>/<nonce>"), lease ms, "<index>/"
# -> 'new', 'sent', 'same' (held by this member's index) or 'other'
_CLAIM = """
local v = redis.call('GET', KEYS[1])
if v == 'sent' then return 'sent' end
if (not v) or v == 'busy:' .. ARGV[1] then
  redis.call('SET', KEYS[1], 'busy:' .. ARGV[1], 'PX', ARGV[2])
  return 'new'
end
if string.sub(v, 1, 5 + #ARGV[3]) == 'busy:' .. ARGV[3] then return 'same' end
return 'other'
"""
# KEYS[1] the claim; ARGV[1] the token: delete it if that token holds it
_RELEASE = """
if redis.call('GET', KEYS[1]) == 'busy:' .. ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisChords:
    """Chord counts, callback claims and results under ``key_prefix`` in Redis."""

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "rabbitq:wf:",
        retention: float = 7 * 24 * 3600.0,
        timeout: float = 5.0,
    ) -> None:
        self.url = url
        self.key_prefix = key_prefix
        self.retention_ms = int(retention * 1000)
        self.timeout = timeout
        self.location = RedisLocation.of(url, key_prefix, CHORD_KEYS, retention, timeout)
        self._client: aioredis.Redis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scripts: tuple[Any, Any, Any] | None = None

    def __repr__(self) -> str:
        return f"RedisChords({redact_url(self.url)!r}, key_prefix={self.key_prefix!r})"

    def _redis(self) -> tuple[aioredis.Redis, Any, Any, Any]:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._scripts is None:
            self._client = new_client(
                self.url,
                timeout=self.timeout,
                name=CLIENT_NAME,
                # Every command here is idempotent (a mark, a result, a claim by its own
                # token, "sent"): sent again once on a new connection after a cut one.
                retry=Retry(ExponentialBackoff(cap=0.5), 2),
                retry_on_error=[ConnectionError, TimeoutError],
            )
            self._loop = loop
            self._scripts = (
                self._client.register_script(_MARK),
                self._client.register_script(_CLAIM),
                self._client.register_script(_RELEASE),
            )
        return self._client, *self._scripts

    async def put_result(self, message_id: str, result: bytes) -> None:
        client, *_ = self._redis()
        try:
            await client.set(self.key_prefix + "result:" + message_id, result, px=self.retention_ms)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc

    async def result(self, message_id: str) -> Any:
        client, *_ = self._redis()
        try:
            raw = await client.get(self.key_prefix + "result:" + message_id)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc
        return None if raw is None else orjson.loads(raw)

    async def mark(self, group_id: str, index: int, message_id: str) -> int:
        _, mark, _, _ = self._redis()
        key = self.key_prefix + "chord:" + group_id
        try:
            return int(await mark(keys=[key], args=[index, message_id, self.retention_ms]))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc

    async def results(self, group_id: str) -> Sequence[tuple[int, str, Any]]:
        client, *_ = self._redis()
        try:
            members = await client.hgetall(self.key_prefix + "chord:" + group_id)
            done = sorted((int(i), _text(mid)) for i, mid in members.items())
            keys = [self.key_prefix + "result:" + mid for _, mid in done]
            raw = await client.mget(keys) if keys else []
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc
        return [
            (i, mid, None if r is None else orjson.loads(r))
            for (i, mid), r in zip(done, raw, strict=True)
        ]

    async def register(self, group_id: str, shape: str) -> str:
        client, *_ = self._redis()
        key = f"{self.key_prefix}claim:{group_id}:{SHAPE}"
        try:
            if await client.set(key, shape, nx=True, px=self.retention_ms):
                return shape
            found = await client.get(key)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc
        return shape if found is None else _text(found)  # (expired meanwhile: free)

    async def claim(self, group_id: str, kind: str, token: str, lease: float) -> str:
        _, _, claim, _ = self._redis()
        key = f"{self.key_prefix}claim:{group_id}:{kind}"
        member = token.partition("/")[0] + "/"
        try:
            return _text(await claim(keys=[key], args=[token, int(lease * 1000), member]))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc

    async def release(self, group_id: str, kind: str, token: str) -> None:
        *_, release = self._redis()
        key = f"{self.key_prefix}claim:{group_id}:{kind}"
        try:
            await release(keys=[key], args=[token])
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc

    async def sent(self, group_id: str, kind: str) -> None:
        client, *_ = self._redis()
        key = f"{self.key_prefix}claim:{group_id}:{kind}"
        try:
            await client.set(key, "sent", px=self.retention_ms)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
