"""``RedisStore``: idempotency keys in Redis, one string per key.

A claim is ``SET key busy:<token> NX PX <lease>``: one command for a new key. If the
key exists, a ``GET`` tells done from busy. Done and release are Lua scripts (``EVAL``)
that compare the token and set (or delete) in one step, so a worker whose lease expired
cannot overwrite the new holder. Expiry is Redis's own (``PX``): no cleanup needed.

Commands are pipelined automatically: a command issued while nothing is in flight goes
at once; the commands that the worker's handlers issue while it (or a pipeline) waits for
Redis's answers go together in the next pipeline (``transaction=False``: each command is
atomic on its own, as when sent alone), one round trip for all of them. Each caller gets
its own command's answer or error; a pipeline that fails as a whole (Redis unreachable,
the connection cut, a timeout) fails every command in it with ``StoreUnavailable``, as a
single failed command would. What limits the store is redis-py's CPU on the worker's
event loop (encoding, parsing, a round trip's fixed cost), and one round trip per
pipeline instead of per command saves most of it: see docs/benchmarks.md.

Redis is as durable as its configuration: with ``appendonly no`` a Redis restart forgets
every key (duplicates then run again). Use AOF with ``appendfsync everysec`` or better
where that matters; see docs/effects.md.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import ConfigurationError
from ..settings import redact_url
from .store import BUSY, DEFAULT_RETENTION, DONE, NEW, Claim, StoreUnavailable, check_positive

DEFAULT_KEY_PREFIX = "rabbitq:idem:"
# Pipelines in flight at once, each on its own connection. One is the fastest: the
# commands issued while it waits for Redis go together in the next (bench.effects on
# 2 cores: 4 in flight gave 0.46x the no-store rate, 2 0.57x, 1 0.68x).
DEFAULT_POOL_SIZE = 1
CLIENT_NAME = "rabbitq-effects"  # as CLIENT LIST shows the store's connections
_DONE = (b"done", "done")  # either way the client decodes

# KEYS[1]: the key; ARGV[1]: 'busy:'..token; ARGV[2]: retention in ms.
_MARK_DONE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], 'done', 'PX', ARGV[2])
  return 1
end
return 0
"""
# KEYS[1]: the key; ARGV[1]: 'busy:'..token.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
_FAULTS = (RedisConnectionError, RedisTimeoutError, RedisError, OSError)
_Pending = tuple[tuple[Any, ...], "asyncio.Future[Any]"]  # a command and its caller


class RedisStore:
    """Remembers handled keys in Redis at ``url`` under ``key_prefix``.

    ``retention`` (seconds, default 7 days) is how long a done key is remembered.
    Commands are pipelined (see the module docstring): ``pool_size`` (default 1) is how
    many pipelines may be in flight at once, each on its own connection; ``timeout``
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
        # The commands for the next pipeline, and the pipelines in flight (pool_size at
        # most: sender tasks, and callers sending their own command), on ``_loop``.
        self._pending: list[_Pending] = []
        self._in_flight: set[asyncio.Future[None]] = set()
        self._starting = False  # a sender has yet to take the pending commands
        self._loop: asyncio.AbstractEventLoop | None = None

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
        """Send the commands already issued and wait for their answers, then close the
        client if the store opened it."""
        if self._loop is not asyncio.get_running_loop():  # nothing pending on this loop
            self._reset(None)
        while self._pending or self._in_flight:
            if not self._in_flight:
                self._start_sender()
            await asyncio.wait(set(self._in_flight))
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            await client.aclose(close_connection_pool=True)

    def _reset(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop, self._pending, self._in_flight, self._starting = loop, [], set(), False

    async def _call(self, *args: Any) -> Any:
        """Run one command in the next pipeline; its answer, or its error raised."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or the last loop ended without close()
            self._reset(loop)
        future: asyncio.Future[Any] = loop.create_future()
        if not self._pending and not self._starting and len(self._in_flight) < self.pool_size:
            # Nothing waits: send it now, from the caller's task. The commands issued
            # meanwhile wait for it, and then go together.
            slot: asyncio.Future[None] = loop.create_future()
            self._in_flight.add(slot)
            try:
                await self._send([(args, future)])
            except BaseException:
                if future.done():
                    future.exception()  # retrieved: the caller gets the cancellation
                raise
            finally:
                slot.set_result(None)
                self._sender_done(slot)
            return future.result()
        self._pending.append((args, future))
        if not self._starting and len(self._in_flight) < self.pool_size:
            self._start_sender()
        return await future

    def _start_sender(self) -> None:
        # The task's first step runs after the callbacks already due: the commands that
        # they issue go along in its first pipeline.
        self._starting = True
        task = asyncio.get_running_loop().create_task(self._sender())
        self._in_flight.add(task)
        task.add_done_callback(self._sender_done)

    def _sender_done(self, done: asyncio.Future[None]) -> None:
        self._in_flight.discard(done)
        if self._pending and not self._starting and len(self._in_flight) < self.pool_size:
            self._start_sender()  # issued after the task's last look

    async def _sender(self) -> None:
        """Send the pending commands (of callers not cancelled meanwhile) as a pipeline,
        and again with those issued meanwhile, until there are none."""
        self._starting = False
        while self._pending:
            batch = [p for p in self._pending if not p[1].done()]
            self._pending = []
            if batch:
                await self._send(batch)

    async def _send(self, batch: list[_Pending]) -> None:
        """One round trip for ``batch``: each caller gets its command's answer or error;
        an error of the whole pipeline is every caller's error."""
        try:
            pipe = self._redis().pipeline(transaction=False)
            for args, _ in batch:
                pipe.execute_command(*args)
            results = await pipe.execute(raise_on_error=False)
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else RedisConnectionError(repr(exc))
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            if error is not exc:  # cancelled: say so once the callers know
                raise
            return
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():  # its caller was cancelled
                continue
            if isinstance(result, Exception):  # this command's error (a ResponseError)
                future.set_exception(result)
            else:
                future.set_result(result)

    async def claim(self, key: str, *, lease: float) -> Claim:
        """``SET NX PX``: NEW if taken, else DONE or BUSY by what the key holds."""
        claim = Claim(key, NEW)
        name = self.key_prefix + key
        mine = b"busy:" + claim.token.encode()
        try:
            if not await self._call("SET", name, mine, "PX", _ms(lease), "NX"):
                value = await self._call("GET", name)
                if value in _DONE:
                    claim.status = DONE
                elif value not in (mine, mine.decode()):
                    # Our own token: the SET was applied, then redis-py retried it after a
                    # connection error. Gone (released, expired): busy, tried again later.
                    claim.status = BUSY
        except _FAULTS as exc:
            raise StoreUnavailable(f"{self!r}: claim failed: {exc}") from exc
        return claim

    async def done(self, claim: Claim) -> bool:
        """Mark the key done for ``retention``; False if the lease was lost meanwhile."""
        if claim.settled:
            return True
        name = self.key_prefix + claim.key
        try:
            ok = await self._call(
                "EVAL", _MARK_DONE, 1, name, "busy:" + claim.token, _ms(self.retention)
            )
        except _FAULTS as exc:
            raise StoreUnavailable(f"{self!r}: marking done failed: {exc}") from exc
        claim.settled = True
        return bool(ok)

    async def release(self, claim: Claim) -> None:
        """Delete the lease so that a retry can run (no-op if already settled)."""
        if claim.settled:
            return
        name = self.key_prefix + claim.key
        try:
            await self._call("EVAL", _RELEASE, 1, name, "busy:" + claim.token)
        except _FAULTS as exc:
            raise StoreUnavailable(f"{self!r}: release failed: {exc}") from exc
        claim.settled = True


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))
