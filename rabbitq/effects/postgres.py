"""``PostgresStore``: idempotency keys in a PostgreSQL table, with a transactional mode.

A claim is an ``INSERT ... ON CONFLICT DO UPDATE ... WHERE expires_at < now()``: the
key is taken if it is absent or its lease (or retention) ran out. Done and release are
updates guarded by the claim's token. Each kind is group-committed
(:mod:`rabbitq.effects.batcher`): the claims issued together are one statement over
the batch (one JSON parameter), one commit, and so are the done marks and the releases;
a caller still gets its own answer, and returns only once its statement committed.
Claims are kept alive by a heartbeat (:mod:`rabbitq.effects.heartbeat`): one statement
every few seconds renews every claim this store holds in the process.
Expired rows are deleted in batches through the ``expires_at`` index by a background
task, never on the path of a message.

Transactional mode: :meth:`PostgresStore.transaction` lends the handler a connection
whose transaction also marks the key done, so the handler's own writes in that database
and the mark commit or roll back together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

import orjson
import psycopg

from ..settings import redact_url
from .batcher import Batcher, FlushCancelled
from .database import DEFAULT_POOL_SIZE, LINK_ERRORS, Conn, Database
from .heartbeat import Heartbeat
from .lane import Lane
from .location import DEFAULT_PREFIX, PostgresLocation, check_prefix
from .schema import KeysSql
from .store import (
    BUSY,
    DEFAULT_RETENTION,
    DONE,
    NEW,
    Claim,
    LeaseLost,
    Status,
    StoreUnavailable,
    check_positive,
)

log = logging.getLogger("rabbitq.effects")

DEFAULT_CLEANUP_INTERVAL = 60.0
CLEANUP_BATCH = 1000
# Statements of one kind (claims, done marks, releases) in flight at once: one, on a
# connection of its own (a Lane); the calls issued meanwhile go together in the next.
FLUSHES_IN_FLIGHT = 1
_FAULTS = (*LINK_ERRORS, StoreUnavailable, FlushCancelled)
_Leased = tuple[Claim, float]  # a claim and its lease, waiting to be sent


def status_of(found: tuple[str | None, str | None] | None, token: str) -> Status:
    """A claim's status from the (state, token) its statement answered (pure): ``'new'``
    when taken, or its own token found (the statement sent again after a cut); DONE or
    BUSY by the state found otherwise; none (a row committed after the statement
    began) is busy."""
    state, holder = found or (None, None)
    if state == "new" or (state == "busy" and holder == token):
        return NEW
    return DONE if state == "done" else BUSY


class PostgresStore:
    """Remembers handled keys in ``<prefix>idempotency`` of the database at ``dsn``.

    ``retention`` (seconds, default 7 days) is how long a done key is remembered.
    The table is created on first use and by ``rabbitq effects init MODULE:APP``.
    ``location`` names its companions (the status store, the chord store: same
    database, same prefix, retention and timeout; see :mod:`.location`).
    ``cleanup_interval`` seconds between deletions of expired keys (None: never; call
    :meth:`cleanup` yourself).
    """

    transactional = True  # it can lend the handler a connection (ctx.transaction())

    def __init__(
        self,
        dsn: str,
        *,
        retention: float = DEFAULT_RETENTION,
        prefix: str = DEFAULT_PREFIX,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout: float = 5.0,
        cleanup_interval: float | None = DEFAULT_CLEANUP_INTERVAL,
    ) -> None:
        self.retention = check_positive("retention", retention)
        self.sql = KeysSql(check_prefix(prefix) + "idempotency")
        self.location = PostgresLocation(dsn, prefix, self.retention, timeout)
        self.db = Database(
            dsn,
            schema=self.sql.create(),
            schema_name=self.sql.table,
            pool_size=pool_size,
            timeout=timeout,
        )
        self.cleanup_interval = cleanup_interval
        self._cleaner: asyncio.Task[None] | None = None
        # Claims and done marks each keep a connection (a Lane: no pool checkout and check
        # per statement); releases, rarer, borrow one from the pool.
        self._claim_lane, self._done_lane = Lane(self.db), Lane(self.db)
        self._claims: Batcher[_Leased, Status] = Batcher(
            self._claim_batch, key=lambda leased: leased[0].key, max_in_flight=FLUSHES_IN_FLIGHT
        )
        self._dones: Batcher[Claim, bool] = Batcher(
            self._done_batch, max_in_flight=FLUSHES_IN_FLIGHT
        )
        self._releases: Batcher[Claim, None] = Batcher(
            self._release_batch, max_in_flight=FLUSHES_IN_FLIGHT
        )
        self._heartbeat = Heartbeat(self._renew_batch, repr(self))

    def __repr__(self) -> str:
        return f"PostgresStore({redact_url(self.db.dsn)!r}, table={self.sql.table!r})"

    async def open(self) -> None:
        """Open the pool, create the table if missing, start the cleanup task."""
        await self.db.open()
        if self.cleanup_interval is not None and self._cleaner is None:
            self._cleaner = asyncio.create_task(self._clean_every(self.cleanup_interval))

    async def close(self) -> None:
        """Send the claims, done marks and releases already issued and wait for them; stop
        the cleanup task and close the pool."""
        for batcher in (self._claims, self._dones, self._releases):
            await batcher.drain()
        await self._heartbeat.close()
        await self._claim_lane.close()
        await self._done_lane.close()
        cleaner, self._cleaner = self._cleaner, None
        if cleaner is not None:
            cleaner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await cleaner
        await self.db.close()

    async def claim(self, key: str, *, lease: float) -> Claim:
        """Take ``key`` for at most ``lease`` seconds: NEW, DONE (a duplicate) or BUSY.
        A NEW claim is taken for the heartbeat's TTL and renewed while held."""
        claim = Claim(key, NEW)
        sent = asyncio.get_running_loop().time()
        try:
            claim.status = await self._claims.submit((claim, self._heartbeat.first_ttl(lease)))
        except _FAULTS as exc:
            raise StoreUnavailable(f"{self!r}: claim failed: {exc}") from exc
        if claim.status is NEW:
            self._heartbeat.hold(claim, sent=sent, lease=lease)
        return claim

    async def done(self, claim: Claim) -> bool:
        """Mark the key done for ``retention``; False if the lease was lost meanwhile."""
        try:
            if claim.settled:
                return True
            try:
                ok = await self._dones.submit(claim)
            except _FAULTS as exc:
                raise StoreUnavailable(f"{self!r}: marking done failed: {exc}") from exc
        finally:
            self._heartbeat.drop(claim)
        claim.settled = True
        return ok

    async def release(self, claim: Claim) -> None:
        """Delete the lease so that a retry can run (no-op if already settled)."""
        try:
            if claim.settled:
                return
            try:
                await self._releases.submit(claim)
            except _FAULTS as exc:
                raise StoreUnavailable(f"{self!r}: release failed: {exc}") from exc
        finally:
            self._heartbeat.drop(claim)
        claim.settled = True

    async def _claim_batch(self, batch: list[_Leased]) -> list[Status]:
        """One statement for the claims of ``batch`` (distinct keys, see the Batcher)."""
        params = {
            "batch": orjson.dumps(
                [{"key": c.key, "token": c.token, "lease": lease} for c, lease in batch]
            ).decode()
        }
        rows = await self._claim_lane.fetch(self.sql.claim_many(), params)
        found = {key: (state, token) for key, state, token in rows}
        return [status_of(found.get(c.key), c.token) for c, _ in batch]

    async def _done_batch(self, batch: list[Claim]) -> list[bool]:
        """One statement for the done marks of ``batch``: True where the lease was held."""
        params = {"batch": _pairs(batch), "keep": self.retention}
        rows = await self._done_lane.fetch(self.sql.done_many(), params)
        held = {token for (token,) in rows}
        return [c.token in held for c in batch]

    async def _renew_batch(self, batch: Sequence[tuple[Claim, float]]) -> set[str]:
        """One statement renewing ``batch`` (claims and TTLs): the tokens still held."""
        params = {
            "batch": orjson.dumps(
                [{"key": c.key, "token": c.token, "ttl": ttl} for c, ttl in batch]
            ).decode()
        }
        try:
            async with self.db.connection() as conn:
                cur = await conn.execute(self.sql.renew_many(), params)
                return {token for (token,) in await cur.fetchall()}
        except _FAULTS as exc:
            raise StoreUnavailable(f"{self!r}: renewing claims failed: {exc}") from exc

    async def _release_batch(self, batch: list[Claim]) -> list[None]:
        """One statement for the releases of ``batch``."""
        params = {"batch": _pairs(batch)}
        async with self.db.connection() as conn:
            await conn.execute(self.sql.release_many(), params)
        return [None] * len(batch)

    @contextlib.asynccontextmanager
    async def transaction(self, claim: Claim) -> AsyncIterator[Conn]:
        """A connection in a transaction that also marks ``claim`` done at commit.

        If the block raises, everything rolls back and the key stays claimed (the worker
        then releases it). If the lease was lost to another worker, :class:`LeaseLost`
        rolls the block's writes back: only one worker's writes ever commit.

        Three round trips besides the block's own: ``BEGIN`` (which is also the pooled
        connection's check), and the done mark and ``COMMIT`` sent together
        (:meth:`~rabbitq.effects.schema.KeysSql.commit_done`: a lost lease fails the
        mark, so the ``COMMIT`` after it is never run). The block must not commit or
        roll back the transaction itself (a ``conn.transaction()`` inside it is a
        savepoint, as in any transaction).
        """
        if claim.settled:
            raise LeaseLost(f"key {claim.key!r} is already settled: one transaction per claim")
        async with self.db.connection(begin=True) as conn:
            try:
                yield conn
            except BaseException:
                await _rollback(conn)
                raise
            if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                log.error(  # its writes committed before the done mark: not once-only
                    "the transaction of key %r was ended inside ctx.transaction(); leave "
                    "the COMMIT to rabbitq (docs/effects.md)",
                    claim.key,
                )
            try:
                await conn.execute(self.sql.commit_done(claim.key, claim.token, self.retention))
            except psycopg.errors.DivisionByZero:  # the mark found no lease of this token
                await _rollback(conn)
                raise LeaseLost(
                    f"the lease on key {claim.key!r} expired and another worker took it"
                ) from None
            except BaseException:
                await _rollback(conn)  # unless the COMMIT itself failed: then a no-op
                raise
        claim.settled = True

    async def cleanup(self, *, limit: int = CLEANUP_BATCH) -> int:
        """Delete up to ``limit`` expired keys (through the index); return how many."""
        async with self.db.connection() as conn:
            cur = await conn.execute(self.sql.cleanup(), {"limit": limit})
            return cur.rowcount

    async def _clean_every(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                while await self.cleanup() == CLEANUP_BATCH:
                    await asyncio.sleep(0)  # more to do: another batch, yielding in between
            except StoreUnavailable as exc:
                log.warning("cleanup of expired idempotency keys failed: %s", exc)

    async def drop(self) -> None:
        """Drop the table (for tests and uninstalling)."""
        async with self.db.connection() as conn:
            await conn.execute(self.sql.drop())


async def _rollback(conn: Conn) -> None:
    """End the connection's transaction; a connection that cannot is dropped by the pool."""
    with contextlib.suppress(*LINK_ERRORS):
        await conn.execute("ROLLBACK")


def _pairs(batch: Sequence[Claim]) -> str:
    """A batch's keys and tokens as the JSON its statement reads (pure)."""
    return orjson.dumps([{"key": c.key, "token": c.token} for c in batch]).decode()
