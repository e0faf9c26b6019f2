"""``RedisCancels``: cancellations as keys ``<base>cancel:<message_id>`` that expire
after :data:`~rabbitq.cancellation.model.KEEP`, beside the app's other Redis stores.

A lookup is one ``MGET`` for every delivery of one window (the stage coalesces them:
:mod:`rabbitq.cancellation.lookups`): one command and one round trip, which reads the
store's epoch too (:mod:`rabbitq.effects.epoch`): a Redis that lost its data
(restarted without persistence) is logged as a WARNING, with the time before which
cancellations may be lost. Expiry is Redis's own: nothing to clean.

A cancellation survives a Redis restart only with an AOF (``appendonly yes``):
:meth:`RedisCancels.durable` says whether it has one (docs/control.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ..effects import epoch
from ..effects.location import RedisLocation
from ..effects.redisclient import new_client
from ..effects.store import StoreUnavailable
from ..settings import redact_url
from .model import KEEP

CANCEL_KEYS = "cancel:"


class RedisCancels:
    """The cancellations of the Redis at ``location``."""

    def __init__(self, location: RedisLocation, keep: float = KEEP) -> None:
        self.location = location
        self.prefix = location.base + CANCEL_KEYS
        self.keep_ms = int(keep * 1000)
        self._client: aioredis.Redis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.epoch_key = location.base + epoch.EPOCH_KEY
        self.watch = epoch.EpochWatch(repr(self), "cancellations")
        self._durable: bool | None = None
        self._durable_known = False

    def __repr__(self) -> str:
        return f"RedisCancels({redact_url(self.location.url)!r}, key_prefix={self.prefix!r})"

    def _redis(self) -> aioredis.Redis:
        loop = asyncio.get_running_loop()
        if self._client is None or loop is not self._loop:  # a client serves one loop
            self._loop = loop
            t = self.location.timeout
            self._client = new_client(self.location.url, timeout=t, name="rabbitq-cancel")
        return self._client

    async def add(self, message_ids: Sequence[str]) -> None:
        at = str(round(time.time(), 3))
        try:
            pipe = self._redis().pipeline(transaction=False)
            pipe.set(self.epoch_key, epoch.new_epoch(), nx=True)
            pipe.get(self.epoch_key)
            for mid in message_ids:
                pipe.set(self.prefix + mid, at, px=self.keep_ms)
            replies = await pipe.execute()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"cannot record cancellations in {self!r}: {exc}") from exc
        self.watch.saw(epoch.text(replies[1]))

    async def durable(self) -> bool | None:
        """Whether a cancellation recorded here survives a restart of this Redis: an AOF
        (``appendonly yes``); None when its settings cannot be read (read once)."""
        if not self._durable_known:
            try:
                self._durable = epoch.durable(*await epoch.persistence(self._redis()))
            except (RedisError, OSError) as exc:
                raise StoreUnavailable(f"{self!r}: {exc}") from exc
            self._durable_known = True
        return self._durable

    async def which(self, message_ids: Sequence[str]) -> set[str]:
        if not message_ids:
            return set()
        try:
            keys = [self.epoch_key, *(self.prefix + mid for mid in message_ids)]
            now, *found = await self._redis().mget(keys)
            seen = epoch.text(now)
            if seen is None:  # a new store, or one that lost its data: a new epoch
                seen = await epoch.current(self._redis(), self.epoch_key)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc
        self.watch.saw(seen)
        return {mid for mid, value in zip(message_ids, found, strict=True) if value is not None}

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
