"""``RedisStore``: idempotency keys in Redis, one string per key.

A key holds ``busy:<token>`` while leased and ``done`` once handled. A claim is ``SET
key busy:<token> NX PX <lease>``, and the key's value if that found it taken (done or
busy); done and release compare the token and set (or delete) in one step, so a worker
whose lease expired cannot overwrite the new holder. Expiry is Redis's own (``PX``):
there is nothing to clean.

Group commit (:mod:`rabbitq.effects.batcher`): the claims, done marks and releases that
the worker's handlers issue in one turn of the event loop, or while the previous round
trip is in flight, go in one pipeline, as one Lua script call per kind (``EVAL`` with
every key of the batch): one round trip and three commands for all of them instead of
one or two commands each. What limits the store is redis-py's CPU on the worker's event
loop (encoding and parsing per command), which this saves: see docs/benchmarks.md.
Each script works key by key with ``redis.pcall``, so each caller gets its own answer
or error (a key of the wrong type fails its caller alone); a pipeline that fails as a
whole (Redis unreachable, the connection cut, a timeout) fails every call in it with
``StoreUnavailable``, as a single failed command would. A script is atomic as a whole,
and each key's step is exactly the single-key command it replaces.

Redis is as durable as its configuration: with ``appendonly no`` a Redis restart forgets
every key (duplicates then run again). Use AOF with ``appendfsync everysec`` or better
where that matters; see docs/effects.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import ConfigurationError
from ..settings import redact_url
from .batcher import Batcher, FlushCancelled
from .store import (
    BUSY,
    DEFAULT_RETENTION,
    DONE,
    NEW,
    Claim,
    Status,
    StoreUnavailable,
    check_positive,
)

DEFAULT_KEY_PREFIX = "rabbitq:idem:"
# Pipelines in flight at once, each on its own connection. One is the fastest: the
# calls issued while it waits for Redis go together in the next (bench.effects on
# 2 cores: 4 in flight gave 0.46x the no-store rate, 2 0.57x, 1 0.68x).
DEFAULT_POOL_SIZE = 1
CLIENT_NAME = "rabbitq-effects"  # as CLIENT LIST shows the store's connections
_DONE = (b"done", "done")  # either way the client decodes

# KEYS: the keys; ARGV[2i-1]: 'busy:'..token of KEYS[i], ARGV[2i]: its lease in ms.
# Per key: 1 if taken, else the value found (an error reply for that key alone).
_CLAIM = """
local out = {}
for i, key in ipairs(KEYS) do
  local taken = redis.pcall('SET', key, ARGV[2 * i - 1], 'NX', 'PX', ARGV[2 * i])
  if type(taken) == 'table' and taken.err then
    out[i] = taken
  elseif taken then
    out[i] = 1
  else
    out[i] = redis.pcall('GET', key)
  end
end
return out
"""
# KEYS: the keys; ARGV[i]: 'busy:'..token of KEYS[i]; ARGV[#KEYS + 1]: retention in ms.
# Per key: 1 if it was still leased by that token (now done), else 0.
_MARK_DONE = """
local out = {}
local keep = ARGV[#KEYS + 1]
for i, key in ipairs(KEYS) do
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    out[i] = value
  elseif value == ARGV[i] then
    local set = redis.pcall('SET', key, 'done', 'PX', keep)
    if set.err then out[i] = set else out[i] = 1 end
  else
    out[i] = 0
  end
end
return out
"""
# KEYS: the keys; ARGV[i]: 'busy:'..token of KEYS[i]. Per key: 1 if deleted, else 0.
_RELEASE = """
local out = {}
for i, key in ipairs(KEYS) do
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    out[i] = value
  elseif value == ARGV[i] then
    out[i] = redis.pcall('DEL', key)
  else
    out[i] = 0
  end
end
return out
"""
_SCRIPTS = {"claim": _CLAIM, "done": _MARK_DONE, "release": _RELEASE}
_FAULTS = (RedisConnectionError, RedisTimeoutError, RedisError, OSError, FlushCancelled)


@dataclass(frozen=True, slots=True)
class Op:
    """One call waiting for the next pipeline: ``kind`` (claim, done, release) of
    ``name`` (the Redis key) by ``value`` (``busy:<token>``); ``ms`` is a claim's lease."""

    kind: str
    name: str
    value: str
    ms: int = 0


def plan(ops: Sequence[Op], retention_ms: int) -> list[tuple[str, list[int], list[Any]]]:
    """The script calls of one pipeline (pure): per kind present, in the order of
    ``_SCRIPTS``, the ``EVAL`` arguments and the positions in ``ops`` it answers."""
    calls: list[tuple[str, list[int], list[Any]]] = []
    for kind, script in _SCRIPTS.items():
        at = [i for i, op in enumerate(ops) if op.kind == kind]
        if not at:
            continue
        keys = [ops[i].name for i in at]
        if kind == "claim":
            argv: list[Any] = [x for i in at for x in (ops[i].value, ops[i].ms)]
        else:
            argv = [ops[i].value for i in at]
            if kind == "done":
                argv.append(retention_ms)
        calls.append((kind, at, ["EVAL", script, len(keys), *keys, *argv]))
    return calls


def answer(op: Op, reply: Any) -> Status | bool | Exception:
    """What ``reply`` (one key's part of its script's answer) means for ``op`` (pure):
    a claim's status, whether a done mark or release found the lease held, or the
    error of that key alone."""
    if isinstance(reply, Exception):
        return reply
    if op.kind != "claim":
        return bool(reply == 1)
    if reply == 1 or reply in (op.value, op.value.encode()):
        # Our own token: the script ran, then redis-py retried it after a connection
        # error, and it found the key taken by this very claim.
        return NEW
    return DONE if reply in _DONE else BUSY


class RedisStore:
    """Remembers handled keys in Redis at ``url`` under ``key_prefix``.

    ``retention`` (seconds, default 7 days) is how long a done key is remembered.
    Calls are group-committed (see the module docstring): ``pool_size`` (default 1) is
    how many pipelines may be in flight at once, each on its own connection; ``timeout``
    bounds connecting, each pipeline's round trip and the wait for a free connection.
    ``client`` shares an existing ``redis.asyncio.Redis`` instead of opening one.
    """

    transactional = False  # no transaction to lend a handler

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        retention: float = DEFAULT_RETENTION,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        timeout: float = 5.0,
        pool_size: int = DEFAULT_POOL_SIZE,
        client: aioredis.Redis | None = None,
    ) -> None:
        if not key_prefix:
            raise ConfigurationError("key_prefix must not be empty")
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise ConfigurationError(f"pool_size must be a positive integer, not {pool_size!r}")
        self.url = url
        self.retention = check_positive("retention", retention)
        self.key_prefix = key_prefix
        self.timeout = timeout
        self.pool_size = pool_size
        self._client = client
        self._owns_client = client is None
        self._ops: Batcher[Op, Status | bool] = Batcher(self._send, max_in_flight=pool_size)

    def __repr__(self) -> str:
        return f"RedisStore({redact_url(self.url)!r}, key_prefix={self.key_prefix!r})"

    def _redis(self) -> aioredis.Redis:
        if self._client is None:
            pool = aioredis.BlockingConnectionPool.from_url(
                self.url,
                max_connections=self.pool_size,
                timeout=self.timeout,  # waiting for a free connection
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                health_check_interval=30,
                client_name=CLIENT_NAME,
            )
            self._client = aioredis.Redis(connection_pool=pool)
        return self._client

    async def open(self) -> None:
        """Connect and check that Redis answers."""
        try:
            await self._redis().ping()
        except _FAULTS as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc

    async def close(self) -> None:
        """Send the calls already issued and wait for their answers, then close the
        client if the store opened it."""
        await self._ops.drain()
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            await client.aclose(close_connection_pool=True)

    async def _send(self, ops: list[Op]) -> list[Status | bool | Exception]:
        """One pipeline for ``ops``: one script call per kind, one answer per call."""
        calls = plan(ops, _ms(self.retention))
        pipe = self._redis().pipeline(transaction=False)
        for _, _, args in calls:
            pipe.execute_command(*args)
        replies = await pipe.execute(raise_on_error=False)
        answers: list[Status | bool | Exception] = [RuntimeError("unanswered")] * len(ops)
        for (_, at, _), reply in zip(calls, replies, strict=True):
            for n, i in enumerate(at):
                # A script that failed as a whole (an error reply) fails each of its calls.
                part = reply if isinstance(reply, Exception) else reply[n]
                answers[i] = answer(ops[i], part)
        return answers

    async def claim(self, key: str, *, lease: float) -> Claim:
        """``SET NX PX``: NEW if taken, else DONE or BUSY by what the key holds."""
        claim = Claim(key, NEW)
        op = Op("claim", self.key_prefix + key, "busy:" + claim.token, _ms(lease))
        try:
            status = await self._ops.submit(op)
        except _FAULTS as exc:
            raise StoreUnavailable(f"{self!r}: claim failed: {exc}") from exc
        assert isinstance(status, Status)
        claim.status = status
        return claim

    async def done(self, claim: Claim) -> bool:
        """Mark the key done for ``retention``; False if the lease was lost meanwhile."""
        if claim.settled:
            return True
        op = Op("done", self.key_prefix + claim.key, "busy:" + claim.token)
        try:
            ok = await self._ops.submit(op)
        except _FAULTS as exc:
            raise StoreUnavailable(f"{self!r}: marking done failed: {exc}") from exc
        claim.settled = True
        return bool(ok)

    async def release(self, claim: Claim) -> None:
        """Delete the lease so that a retry can run (no-op if already settled)."""
        if claim.settled:
            return
        op = Op("release", self.key_prefix + claim.key, "busy:" + claim.token)
        try:
            await self._ops.submit(op)
        except _FAULTS as exc:
            raise StoreUnavailable(f"{self!r}: release failed: {exc}") from exc
        claim.settled = True


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))
