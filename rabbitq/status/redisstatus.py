"""``RedisStatus``: status records in Redis, one list per message.

Each write appends to the list ``<key_prefix><message_id>`` one element: a JSON array
of the message's records in that write (``[state, at, attempt, detail, group_id]``),
whose expiry is set again (``PEXPIRE``) on each write: a message's history is kept for
``retention`` after its last record. A write is one command for the whole batch: a Lua
script (``EVALSHA``) that does the ``RPUSH`` and ``PEXPIRE`` of each message in it on the
server. One command instead of a pipeline of two per message: redis-py builds and parses
each command of a pipeline on the worker's event loop, which cost the worker about 40%
of its rate at 3 records a message (docs/benchmarks.md). It runs on a connection of its
own (not the idempotency store's). Like the idempotency keys, records survive a Redis
restart only with persistence (AOF) configured.

A workflow group has a set of its members' ids, ``<group_prefix><group_id>``, and one
of its callbacks' ids, ``<callback_prefix><group_id>`` (the key prefix without its last
``:``, then ``-group:`` or ``-callback:``: ``rabbitq:status-group:<id>``, a name no
message's list can have), added to by the same script and kept as long as the lists:
their expiry is set again at each write of a member.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from ..effects.location import DEFAULT_REDIS_URL, STATUS_KEYS, RedisLocation
from ..effects.redisclient import new_client
from ..effects.store import StoreUnavailable
from ..errors import ConfigurationError
from ..settings import redact_url
from .group import GroupRecords
from .model import Record

DEFAULT_KEY_PREFIX = "rabbitq:" + STATUS_KEYS  # rabbitq:status:
DEFAULT_RETENTION = 7 * 24 * 3600.0  # as the idempotency keys'
CLIENT_NAME = "rabbitq-status"
READ_BATCH = 1000  # member lists read per round trip
MAX_CALLBACKS = 100  # messages read as one group's callbacks, at most
# KEYS[1..n]: one list per message, then group sets; ARGV[1]: retention in ms, ARGV[2]:
# n; ARGV[k + 2]: for a list, the records of KEYS[k] written now, as one JSON array; for
# a set, the message id to add to it.
_APPEND = """
local n = tonumber(ARGV[2])
for k = 1, #KEYS do
  if k <= n then
    redis.call('RPUSH', KEYS[k], ARGV[k + 2])
  else
    redis.call('SADD', KEYS[k], ARGV[k + 2])
  end
  redis.call('PEXPIRE', KEYS[k], ARGV[1])
end
return #KEYS
"""


class RedisStatus:
    """Keeps status records in Redis at ``url`` under ``key_prefix`` for ``retention``
    seconds (default 7 days); ``timeout`` bounds connecting and each write. ``location``
    names its chord store (:mod:`rabbitq.effects.location`)."""

    def __init__(
        self,
        url: str = DEFAULT_REDIS_URL,
        *,
        retention: float = DEFAULT_RETENTION,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        timeout: float = 5.0,
    ) -> None:
        if not key_prefix:
            raise ConfigurationError("key_prefix must not be empty")
        if not retention > 0:
            raise ConfigurationError(f"retention must be positive seconds, not {retention!r}")
        self.url = url
        self.retention_ms = int(retention * 1000)
        self.key_prefix = key_prefix
        self.group_prefix = key_prefix.removesuffix(":") + "-group:"
        self.callback_prefix = key_prefix.removesuffix(":") + "-callback:"
        self.timeout = timeout
        self.location = RedisLocation.of(url, key_prefix, STATUS_KEYS, retention, timeout)
        self._client: aioredis.Redis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._script: Any = None

    def __repr__(self) -> str:
        return f"RedisStatus({redact_url(self.url)!r}, key_prefix={self.key_prefix!r})"

    def _redis(self) -> aioredis.Redis:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:  # a client belongs to its loop
            self._client = new_client(
                self.url,
                timeout=self.timeout,
                name=CLIENT_NAME,
                # No retries: a write sent twice would record its events twice, and a
                # failed one is counted as lost instead (best effort).
                retry=Retry(NoBackoff(), 0),
            )
            self._loop = loop
            self._script = self._client.register_script(_APPEND)
        return self._client

    async def open(self) -> None:
        """Check that Redis answers (``rabbitq effects init``)."""
        try:
            await self._redis().ping()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r} is unavailable: {exc}") from exc

    async def write(self, records: Sequence[Record]) -> None:
        """Append ``records``: one command."""
        by_message: dict[str, list[tuple[Any, ...]]] = {}
        indexed: dict[tuple[str, str], None] = {}  # (set key, message id), in order
        for r in records:
            entry: tuple[Any, ...] = (r.state, r.at, r.attempt, r.detail or None, r.group_id)
            if r.group_id is not None:
                indexed[self.group_prefix + r.group_id, r.message_id] = None
            if r.callback_of is not None:
                entry += (r.callback_of,)
                indexed[self.callback_prefix + r.callback_of, r.message_id] = None
            by_message.setdefault(r.message_id, []).append(entry)
        keys = [self.key_prefix + message_id for message_id in by_message]
        keys.extend(key for key, _ in indexed)
        args: list[bytes | int | str] = [self.retention_ms, len(by_message)]
        args.extend(orjson.dumps(entries) for entries in by_message.values())
        args.extend(message_id for _, message_id in indexed)
        self._redis()  # (the script is registered with the client)
        try:
            await self._script(keys=keys, args=args)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: write failed: {exc}") from exc

    async def read(self, message_id: str) -> list[Record]:
        """Every record kept for ``message_id``."""
        try:
            raw: list[bytes | str] = await self._redis().lrange(self.key_prefix + message_id, 0, -1)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: read failed: {exc}") from exc
        return [_record(message_id, entry) for item in raw for entry in orjson.loads(item)]

    async def ids_starting_with(self, prefix: str, limit: int) -> list[str]:
        """At most ``limit`` message ids starting with ``prefix`` (``SCAN MATCH``: it
        walks the keyspace, for an operator's command, not a message's path)."""
        found: set[str] = set()
        pattern = _glob_escape(self.key_prefix + prefix) + "*"
        try:
            async for key in self._redis().scan_iter(match=pattern, count=1000):
                text = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
                found.add(text[len(self.key_prefix) :])
                if len(found) >= limit:
                    break
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: read failed: {exc}") from exc
        return sorted(found)

    async def read_group(self, group_id: str, limit: int) -> GroupRecords:
        """The records of at most ``limit`` members of ``group_id`` (which ones, when it
        has more, is the set's scan order) and of its callbacks; ``SCARD`` counts them."""
        client = self._redis()
        try:
            total = await client.scard(self.group_prefix + group_id)
            members = await _scan(client, self.group_prefix + group_id, limit)
            callbacks = await _scan(client, self.callback_prefix + group_id, MAX_CALLBACKS)
            seen = set(members)
            ids = members + [c for c in callbacks if c not in seen]
            records: list[Record] = []
            for start in range(0, len(ids), READ_BATCH):
                chunk = ids[start : start + READ_BATCH]
                async with client.pipeline(transaction=False) as pipe:
                    for message_id in chunk:
                        pipe.lrange(self.key_prefix + message_id, 0, -1)
                    lists = await pipe.execute()
                for message_id, raw in zip(chunk, lists, strict=True):
                    records.extend(
                        _record(message_id, entry) for item in raw for entry in orjson.loads(item)
                    )
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"{self!r}: read failed: {exc}") from exc
        return GroupRecords(records, int(total))

    async def close(self) -> None:
        """Close the connection (opened again on next use)."""
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()

    async def drop(self) -> int:
        """Delete every record under ``key_prefix`` and the group indexes beside it (for
        tests); return the keys deleted."""
        client = self._redis()
        deleted = 0
        for prefix in (self.key_prefix, self.group_prefix, self.callback_prefix):
            async for key in client.scan_iter(match=prefix + "*", count=1000):
                deleted += await client.delete(key)
        return deleted


def _glob_escape(text: str) -> str:
    """``text`` matched literally in a Redis ``MATCH`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


async def _scan(client: aioredis.Redis, key: str, limit: int) -> list[str]:
    """At most ``limit`` members of the set ``key``, as text."""
    found: dict[str, None] = {}
    cursor = 0
    while True:
        cursor, batch = await client.sscan(key, cursor, count=1000)
        for raw in batch:
            found[raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)] = None
        if cursor == 0 or len(found) >= limit:
            return list(found)[:limit]


def _record(message_id: str, entry: list[Any]) -> Record:
    state, at, attempt, detail, group_id, *rest = entry  # callback_of, when there is one
    return Record(message_id, state, at, attempt, detail or {}, group_id, *rest[:1])
