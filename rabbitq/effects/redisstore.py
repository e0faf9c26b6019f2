"""``RedisStore``: idempotency keys in Redis, one string per key.

A key holds ``busy:<token>`` while leased and ``done`` once handled. A claim is ``SET
key busy:<token> NX PX <lease>``, and the key's value if that found it taken (done or
busy); done and release compare the token and set (or delete) in one step, so a worker
whose lease expired cannot overwrite the new holder. Expiry is Redis's own (``PX``):
there is nothing to clean.

Group commit (:mod:`rabbitq.effects.batcher`): the claims, done marks and releases that
the worker's handlers issue in one turn of the event loop, or while the previous round
trip is in flight, go in one pipeline, as one Lua script call per kind (``EVAL`` with
the batch as one JSON argument, answered by one string): one round trip and at most
three commands for all of them instead of one or two commands each. What limits the
store is redis-py's CPU on the worker's event loop (encoding and parsing per argument
and reply), which this saves: see docs/benchmarks.md.
Each script works key by key with ``redis.pcall``, so each caller gets its own answer
or error (a key of the wrong type fails its caller alone); a pipeline that fails as a
whole (Redis unreachable, the connection cut, a timeout) fails every call in it with
``StoreUnavailable``, as a single failed command would. A script is atomic as a whole,
and each key's step is exactly the single-key command it replaces.

Claims are kept alive by a heartbeat (:mod:`rabbitq.effects.heartbeat`): one script call
every few seconds renews (``PEXPIRE``) every claim this store holds in the process.

Redis is as durable as its configuration: with ``appendonly no`` a Redis restart forgets
every key (duplicates then run again). Use AOF with ``appendfsync everysec`` or better
where that matters; see docs/effects.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import ConfigurationError
from ..settings import redact_url
from .batcher import Batcher, FlushCancelled
from .heartbeat import Heartbeat
from .location import DEFAULT_REDIS_URL, IDEMPOTENCY_KEYS, RedisLocation
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

DEFAULT_KEY_PREFIX = "rabbitq:" + IDEMPOTENCY_KEYS  # rabbitq:idem:
# Pipelines in flight at once, each on its own connection. One is the fastest: the
# calls issued while it waits for Redis go together in the next (bench.effects on
# 2 cores: 4 in flight gave 0.46x the no-store rate, 2 0.57x, 1 0.68x).
DEFAULT_POOL_SIZE = 1
CLIENT_NAME = "rabbitq-effects"  # as CLIENT LIST shows the store's connections

# Each script takes its batch as one JSON argument, ARGV[1] = [[key, value, ms], ...]
# (value: 'busy:'..token; ms: a claim's lease or the retention), and answers {codes,
# errors}: one character per key, and the message of each key's error in order ('!' in
# codes). One argument to encode and one string to parse per batch, not three and one
# per key: redis-py's encoding and parsing are most of the store's CPU on the worker's
# event loop. (The keys are not passed as KEYS: the store needs one Redis, not a cluster.)
# Claim codes: 'n' taken, 'm' already held by this token, 'd' done, 'b' busy elsewhere.
_CLAIM = """
local codes, errors = {}, {}
for i, item in ipairs(cjson.decode(ARGV[1])) do
  local key, mine = item[1], item[2]
  local taken = redis.pcall('SET', key, mine, 'NX', 'PX', item[3])
  if type(taken) == 'table' and taken.err then
    codes[i] = '!'; errors[#errors + 1] = taken.err
  elseif taken then
    codes[i] = 'n'
  else
    local value = redis.pcall('GET', key)
    if type(value) == 'table' then
      codes[i] = '!'; errors[#errors + 1] = value.err
    elseif value == mine then
      codes[i] = 'm'
    elseif value == 'done' then
      codes[i] = 'd'
    else
      codes[i] = 'b'
    end
  end
end
return {table.concat(codes), errors}
"""
# Codes: '1' the lease was held (now done for ms), '0' not.
_MARK_DONE = """
local codes, errors = {}, {}
for i, item in ipairs(cjson.decode(ARGV[1])) do
  local value = redis.pcall('GET', item[1])
  if type(value) == 'table' then
    codes[i] = '!'; errors[#errors + 1] = value.err
  elseif value == item[2] then
    local set = redis.pcall('SET', item[1], 'done', 'PX', item[3])
    if set.err then
      codes[i] = '!'; errors[#errors + 1] = set.err
    else
      codes[i] = '1'
    end
  else
    codes[i] = '0'
  end
end
return {table.concat(codes), errors}
"""
# Codes: '1' deleted, '0' not held by that token.
_RELEASE = """
local codes, errors = {}, {}
for i, item in ipairs(cjson.decode(ARGV[1])) do
  local value = redis.pcall('GET', item[1])
  if type(value) == 'table' then
    codes[i] = '!'; errors[#errors + 1] = value.err
  elseif value == item[2] then
    redis.pcall('DEL', item[1])
    codes[i] = '1'
  else
    codes[i] = '0'
  end
end
return {table.concat(codes), errors}
"""
# The heartbeat: ARGV[1] = [[key, 'busy:'..token, ms], ...]; codes '1' renewed, '0' not
# held by that token.
_RENEW = """
local codes = {}
for i, item in ipairs(cjson.decode(ARGV[1])) do
  if redis.pcall('GET', item[1]) == item[2] then
    redis.pcall('PEXPIRE', item[1], item[3])
    codes[i] = '1'
  else
    codes[i] = '0'
  end
end
return table.concat(codes)
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
    keep = str(retention_ms)
    for kind, script in _SCRIPTS.items():
        at = [i for i, op in enumerate(ops) if op.kind == kind]
        if not at:
            continue
        items = [
            (ops[i].name, ops[i].value, str(ops[i].ms) if kind == "claim" else keep) for i in at
        ]
        calls.append((kind, at, ["EVAL", script, 0, orjson.dumps(items)]))
    return calls


_STATUS = {"n": NEW, "m": NEW, "d": DONE, "b": BUSY}


def answers(kind: str, reply: Any) -> list[Status | bool | Exception]:
    """What one script's reply means for each of its calls, in order (pure): a claim's
    status (its own token found, after its pipeline was sent again, is NEW), whether a
    done mark or release found the lease held, or the error of that key alone."""
    raw, messages = reply
    codes = raw.decode() if isinstance(raw, bytes) else str(raw)
    errors = iter(messages)
    out: list[Status | bool | Exception] = []
    for code in codes:
        if code == "!":
            message = next(errors)
            out.append(ResponseError(message.decode() if isinstance(message, bytes) else message))
        elif kind == "claim":
            out.append(_STATUS[code])
        else:
            out.append(code == "1")
    return out


class RedisStore:
    """Remembers handled keys in Redis at ``url`` under ``key_prefix``.

    ``retention`` (seconds, default 7 days) is how long a done key is remembered.
    Calls are group-committed (see the module docstring): ``pool_size`` (default 1) is
    how many pipelines may be in flight at once, each on its own connection; ``timeout``
    bounds connecting, each pipeline's round trip and the wait for a free connection.
    ``client`` shares an existing ``redis.asyncio.Redis`` instead of opening one.
    ``location`` names its companions (the status store, the chord store: same Redis,
    ``key_prefix`` without ``idem:`` then ``status:`` or ``wf:``; see :mod:`.location`).
    """

    transactional = False  # no transaction to lend a handler

    def __init__(
        self,
        url: str = DEFAULT_REDIS_URL,
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
        self.location = RedisLocation.of(url, key_prefix, IDEMPOTENCY_KEYS, self.retention, timeout)
        self._client = client
        self._owns_client = client is None
        self._ops: Batcher[Op, Status | bool] = Batcher(self._send, max_in_flight=pool_size)
        self._heartbeat = Heartbeat(self._renew, repr(self))

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
        await self._heartbeat.close()
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
        out: list[Status | bool | Exception] = [RuntimeError("unanswered")] * len(ops)
        for (kind, at, _), reply in zip(calls, replies, strict=True):
            # A script that failed as a whole (an error reply) fails each of its calls.
            parts = [reply] * len(at) if isinstance(reply, Exception) else answers(kind, reply)
            for i, part in zip(at, parts, strict=True):
                out[i] = part
        return out

    async def claim(self, key: str, *, lease: float) -> Claim:
        """``SET NX PX``: NEW if taken, else DONE or BUSY by what the key holds. A NEW
        claim is taken for the heartbeat's TTL (at most ``lease``) and renewed while held."""
        claim = Claim(key, NEW)
        ttl = _ms(self._heartbeat.first_ttl(lease))
        op = Op("claim", self.key_prefix + key, "busy:" + claim.token, ttl)
        sent = asyncio.get_running_loop().time()
        try:
            status = await self._ops.submit(op)
        except _FAULTS as exc:
            raise StoreUnavailable(f"{self!r}: claim failed: {exc}") from exc
        assert isinstance(status, Status)
        claim.status = status
        if status is NEW:
            self._heartbeat.hold(claim, sent=sent, lease=lease)
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
        finally:
            self._heartbeat.drop(claim)
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
        finally:
            self._heartbeat.drop(claim)
        claim.settled = True

    async def _renew(self, batch: Sequence[tuple[Claim, float]]) -> set[str]:
        """One script call renewing ``batch`` (claims and TTLs): the tokens still held."""
        items = [(self.key_prefix + c.key, "busy:" + c.token, _ms(ttl)) for c, ttl in batch]
        try:
            script = ("EVAL", _RENEW, 0, orjson.dumps(items))
            reply = await self._redis().execute_command(*script)  # type: ignore[no-untyped-call]
        except _FAULTS as exc:
            raise StoreUnavailable(f"{self!r}: renewing claims failed: {exc}") from exc
        codes = reply.decode() if isinstance(reply, bytes) else str(reply)
        return {c.token for (c, _), code in zip(batch, codes, strict=True) if code == "1"}


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))
