"""The outbox relay: publish pending outbox rows with confirms, then mark them sent.

One relay is active per outbox table at a time: it holds a PostgreSQL session advisory
lock on its own connection, so a second relay (another process, a restarted one) waits
as a standby and takes over when the first dies (its session, and so its lock, ends).

A batch is published with pipelined confirms. Rows with the same ``order_key`` form a
chain published one after another, and a chain stops at its first failure, so that a
later row never overtakes an earlier one with the same key. A row the broker refuses
waits its own backoff (:mod:`rabbitq.effects.backoff`) and is left out of the batches
meanwhile, with the later rows of its key: it never holds back the others. Rows are marked sent only
after their confirm: a relay killed in between publishes them again on restart, so the
duplicates are bounded by one batch and carry the same ``message_id``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from aio_pika.abc import AbstractChannel, AbstractRobustConnection
from pamqp.commands import Basic

from .._amqp import properties as props
from .._amqp.confirm import error_kind, send_confirmed
from .._amqp.connection import connect
from ..errors import PublishError
from ..settings import TLS
from .backoff import Failure, FailureLog, backoff
from .database import LINK_ERRORS
from .outbox import Outbox
from .schema import lock_id
from .store import StoreUnavailable

log = logging.getLogger("rabbitq.outbox")

ERROR_BACKOFF = 1.0
PURGE_EVERY = 60.0  # seconds between purges of old sent rows


@dataclass(frozen=True, slots=True)
class Row:
    """A pending outbox row."""

    id: int
    exchange: str
    routing_key: str
    message_id: str
    type: str
    body: bytes
    headers: dict[str, Any] | None
    correlation_id: str | None
    order_key: str | None
    attempts: int = 0  # failed publishes so far


def chains(rows: Sequence[Row]) -> list[list[Row]]:
    """The batch as chains: rows sharing an ``order_key`` in id order, one chain per key;
    each row without a key is a chain of its own (pure)."""
    keyed: dict[str, list[Row]] = {}
    out: list[list[Row]] = []
    for row in sorted(rows, key=lambda r: r.id):
        if row.order_key is None:
            out.append([row])
        elif row.order_key in keyed:
            keyed[row.order_key].append(row)
        else:
            keyed[row.order_key] = chain = [row]
            out.append(chain)
    return out


def properties(row: Row) -> Basic.Properties:
    """The AMQP properties of a row's message, as it was stored."""
    return props.stored(
        row.type,
        message_id=row.message_id,
        correlation_id=row.correlation_id,
        headers=row.headers,
    )


class RelayObserver:
    """What the relay reports (no-ops); :class:`~rabbitq.effects.metrics.OutboxMetrics`
    turns it into Prometheus series."""

    def relayed(self, count: int) -> None:
        """``count`` rows were confirmed and marked sent."""

    def relay_error(self, kind: str) -> None:
        """A batch or a row failed: ``kind`` is database, broker or publish."""

    def pending(self, rows: int, oldest_age: float) -> None:
        """The outbox holds ``rows`` pending rows, the oldest ``oldest_age`` seconds old."""

    def failing(self, rows: int) -> None:
        """``rows`` pending rows failed at least once (each waits in its backoff)."""


class Relay:
    """Relays ``outbox`` until :meth:`stop`. ``url`` overrides the app's broker URL."""

    def __init__(
        self,
        outbox: Outbox,
        *,
        url: str | None = None,
        tls: TLS | None = None,
        observer: RelayObserver | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self.outbox = outbox
        self.url = outbox.app.resolved_url(url)
        self.tls = tls or outbox.app.tls
        self.observer = observer or RelayObserver()
        self._on_batch = on_batch  # called after each batch is published (for tests)
        self._stop = asyncio.Event()
        self._conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None
        self._amqp: AbstractRobustConnection | None = None
        self._channel: AbstractChannel | None = None
        self.leader = asyncio.Event()
        self._failures: list[Failure] = []  # of the batch being published
        self._failure_log = FailureLog(outbox.sql.table)

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current batch."""
        self._stop.set()

    async def run(self) -> None:
        """Relay until stopped; errors are logged, counted and retried after a pause."""
        await self.outbox.open()
        last_purge = 0.0
        loop = asyncio.get_running_loop()
        try:
            while not self._stop.is_set():
                try:
                    if not await self._lead():
                        break  # stopped while standing by
                    sent = await self.relay_once()
                    if loop.time() - last_purge > PURGE_EVERY:
                        await self._purge()
                        last_purge = loop.time()
                    await self._report()
                except (StoreUnavailable, *LINK_ERRORS) as exc:
                    log.warning("outbox relay: database error (%s); retrying", exc)
                    self.observer.relay_error("database")
                    await self._drop_db()
                    await self._sleep(ERROR_BACKOFF)
                    continue
                if sent < self.outbox.batch:
                    await self._sleep(self.outbox.poll_interval)
        finally:
            await self.close()

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            pass

    async def _lead(self) -> bool:
        """Hold the relay lock on our own connection, waiting as a standby until we do;
        False if stopped while waiting."""
        if self._conn is not None and not self._conn.closed:
            return True
        self.leader.clear()
        self._conn = await psycopg.AsyncConnection.connect(
            self.outbox.dsn, autocommit=True, connect_timeout=5
        )
        while not self._stop.is_set():
            cur = await self._conn.execute(
                "SELECT pg_try_advisory_lock(%s)", (lock_id("relay:" + self.outbox.sql.table),)
            )
            row = await cur.fetchone()
            if row and row[0]:
                self.leader.set()
                log.info("outbox relay for %s is active", self.outbox.sql.table)
                return True
            await self._sleep(max(self.outbox.poll_interval, 1.0))
        return False

    async def _channel_open(self) -> AbstractChannel:
        if self._amqp is None:
            name = f"rabbitq outbox relay {self.outbox.app}"
            self._amqp = await connect(self.url, name=name, tls=self.tls)
        if self._channel is None or self._channel.is_closed:
            self._channel = await self._amqp.channel(publisher_confirms=True, on_return_raises=True)
        return self._channel

    async def relay_once(self) -> int:
        """Publish one batch of pending rows; return how many were marked sent."""
        assert self._conn is not None
        cur = await self._conn.execute(self.outbox.sql.pending(), {"limit": self.outbox.batch})
        rows = [Row(*r) for r in await cur.fetchall()]
        if not rows:
            return 0
        try:
            channel = await self._channel_open()
        except Exception as exc:
            log.warning("outbox relay: broker unavailable (%s)", exc)
            self.observer.relay_error("broker")
            await self._sleep(ERROR_BACKOFF)
            return 0
        self._failures = []
        results = await asyncio.gather(*(self._send_chain(channel, c) for c in chains(rows)))
        sent = [row_id for ids in results for row_id in ids]
        if self._on_batch is not None:
            self._on_batch(len(sent))
        if sent:
            await self._conn.execute(self.outbox.sql.mark_sent(), {"ids": sent})
            self.observer.relayed(len(sent))
        await self._record_failures()
        return len(sent)

    async def _record_failures(self) -> None:
        """Put each refused row in its backoff, log (bounded), and pause after a failure
        of the link itself."""
        assert self._conn is not None
        failures, self._failures = self._failures, []
        refused = [f for f in failures if f.retry_in > 0]
        if refused:
            await self._conn.execute(
                self.outbox.sql.failed(),
                {
                    "ids": [f.row_id for f in refused],
                    "delays": [f.retry_in for f in refused],
                    "errors": [f.error for f in refused],
                },
            )
        self._failure_log.add(failures)
        if (line := self._failure_log.line()) is not None:
            log.warning("%s", line)
        if len(refused) < len(failures):
            await self._sleep(ERROR_BACKOFF)

    async def _send_chain(self, channel: AbstractChannel, chain: list[Row]) -> list[int]:
        sent: list[int] = []
        for row in chain:
            try:
                await send_confirmed(
                    channel, row.exchange, row.routing_key, row.body, properties(row)
                )
            except PublishError as exc:
                kind = error_kind(exc)
                wait = 0.0 if kind == "interrupted" else backoff(row.attempts + 1)
                log.debug("outbox row %d (%s) not published: %s", row.id, row.type, exc)
                self._failures.append(Failure(row.id, row.type, kind, str(exc)[:500], wait))
                self.observer.relay_error("broker" if kind == "interrupted" else "publish")
                break  # later rows of this key wait for this one
            sent.append(row.id)
        return sent

    async def _report(self) -> None:
        counts = await self.outbox.counts()
        self.observer.pending(counts.pending, counts.oldest_age)
        self.observer.failing(counts.failing)
        if (line := self._failure_log.line()) is not None:  # failures summed meanwhile
            log.warning("%s", line)

    async def _purge(self) -> None:
        assert self._conn is not None
        await self._conn.execute(
            self.outbox.sql.purge_sent(), {"keep": self.outbox.keep_sent, "limit": 10000}
        )

    async def _drop_db(self) -> None:
        conn, self._conn = self._conn, None
        self.leader.clear()
        if conn is not None:
            try:
                await conn.close()
            except Exception as exc:  # already broken: nothing more to release
                log.debug("closing the relay's connection: %s", exc)

    async def close(self) -> None:
        """Close the relay's database and broker connections."""
        await self._drop_db()
        amqp, self._amqp, self._channel = self._amqp, None, None
        if amqp is not None:
            await amqp.close()
        await self.outbox.close()
