"""Running an app's schedules (I/O): the lease on the broker and the tick loop (each
tick's transaction is :mod:`rabbitq.schedule.tick`).

Every process that runs schedules (each worker unless ``--no-schedules``, and
``rabbitq scheduler``) is a :class:`Scheduler` contending for one lease: the exclusive
queue ``<queue>.schedules.lease``. The broker lets one connection declare it; the
others are refused (``RESOURCE_LOCKED``) and try again every second. The broker
deletes the queue when its connection closes (the process died, the network dropped
it, heartbeats stopped: :data:`LEASE_HEARTBEAT`), and the next contender leads. No
other service is involved.

The leader reads the progress record (``<queue>.schedules``: through which tick each
schedule was handled), publishes the missed ticks its ``catch_up`` allows, and then
each tick when it comes due. A tick's messages and the new progress record go in one
AMQP transaction: the broker applies both or neither, so a leader killed at any
moment leaves either the tick published *and* recorded, or neither, and the next
leader publishes exactly the ticks not recorded. A commit that does not complete
within ``tick.COMMIT_TIMEOUT`` (10 s: a broker that lost its quorum, a partition) makes the
leader step down: the tick may or may not have been published, the next leader
publishes it again under the same derived ``message_id`` (a consumer with an
idempotency store runs it once), and the doubt is counted in
``rabbitq_schedule_publish_unconfirmed_total``.

The exclusive queue is not a fence in a partial partition (each side's Mnesia keeps its
own, so two processes hold it). Before every commit the leader therefore takes the
progress record back, unacked, from its quorum queue and commits only if it is the one
it wrote last (:mod:`rabbitq.schedule.fence`); it renews it every second. A leader that finds
another's record publishes nothing, steps down and stands by until the record has
stood still for a lease period. Why this holds: docs/schedules.md, "Through a network partition".
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import TypeVar

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection

from .._amqp.connection import connect_once
from ..crypto.codec import cipher_of
from ..errors import BrokerUnavailable
from ..message import Message
from ..settings import TLS
from . import fence, pause, plan
from . import tick as tick_tx
from .metrics import ScheduleMetrics
from .spec import Schedule, ScheduledApp

log = logging.getLogger("rabbitq.schedule")
T = TypeVar("T")

LEASE_RETRY = 1.0  # seconds between attempts to take the lease
# The AMQP heartbeat of the lease's connection (unless the URL sets ?heartbeat=): the
# broker closes a silent connection, and so frees the lease of a frozen or cut-off
# leader, two to three heartbeats after its last frame (10-15 s; 30-45 s with the
# connections' 15 s).
LEASE_HEARTBEAT = 5
MAX_SLEEP = 5.0  # the loop looks at the wall clock at least this often
# What ends a leadership (the scheduler then contends again): the broker's errors, a
# lost connection, a commit not confirmed in time. (aiormq reports a channel whose
# connection went away as ChannelInvalidStateError, a RuntimeError.)
LOST = (
    aiormq.exceptions.AMQPError,
    aiormq.exceptions.ChannelInvalidStateError,
    ConnectionError,
    OSError,
    TimeoutError,
    BrokerUnavailable,
    fence.LeaseLost,
)


def loss_report(queue: str, exc: BaseException, *, leading: bool) -> tuple[int, str, bool]:
    """How a session that ended with ``exc`` is logged (pure): the level, the line, and
    whether with its traceback. Only a leader says it stopped leading; a lost connection
    is a one-line WARNING; an unexpected error of a leader is an ERROR with its traceback
    (a bug must not end the schedules for good: it contends again). A candidate that
    never led says it cannot contend, in one line, whatever ended its session."""
    said = f"{type(exc).__name__}: {exc}"
    if not leading:
        return logging.WARNING, f"scheduler of {queue} cannot contend ({said}); retrying", False
    line = f"stopped leading the schedules of {queue} ({said}); contending again"
    if isinstance(exc, LOST):
        return logging.WARNING, line, False
    return logging.ERROR, line, True


def instance_name() -> str:
    """Who leads, as the progress record and ``rabbitq schedule list`` show it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def utc_now() -> datetime:
    return datetime.now(UTC)


def _forever(
    schedule: Schedule, ticks: tuple[datetime, ...], after: datetime
) -> Iterator[datetime]:
    yield from ticks
    tick = schedule.next_after(after)
    while True:
        yield tick
        tick = schedule.next_after(tick)


def _head(tick: datetime, name: str) -> tuple[datetime, str, datetime]:
    return tick.astimezone(UTC), name, tick


class Scheduler:
    """Runs ``app``'s schedules while it holds the lease; contends for it otherwise.

    ``await scheduler.run()`` until cancelled. ``metrics`` (a :class:`ScheduleMetrics`)
    counts ticks; ``clock`` returns the aware current time (tests replace it).
    """

    def __init__(
        self,
        app: ScheduledApp,
        *,
        url: str | None = None,
        tls: TLS | None = None,
        metrics: ScheduleMetrics | None = None,
        retry_interval: float = LEASE_RETRY,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.app = app
        self.url = app.resolved_url(url)
        self.tls = tls or app.tls
        self.metrics = metrics or ScheduleMetrics()
        self.metrics.expect(app.schedules)
        self.retry_interval = retry_interval
        self.clock = clock
        self.name = instance_name()
        self.leading = False
        self._progress = plan.Progress(ticks={})
        self._published: dict[str, datetime] = {}
        self._last_error: str | None = None
        self._connection: AbstractConnection | None = None  # the leader's, for pauses
        self._written: datetime | None = None  # `written` of this leadership's last record
        self._committed_at = 0.0  # (loop time) of its last commit
        self._yielded = False  # lost the fence to another leader: wait for a quiet record

    async def run(self) -> None:
        """Contend and lead, reconnecting after any loss, until cancelled (at once for
        an app without schedules)."""
        if not self.app.schedules:
            return
        while True:
            try:
                connection = await connect_once(
                    self.url,
                    name=f"rabbitq scheduler {self.app.queue}",
                    tls=self.tls,
                    heartbeat=LEASE_HEARTBEAT,
                )
            except BrokerUnavailable as exc:
                self._note(exc)
                await asyncio.sleep(self.retry_interval)
                continue
            try:
                await self._session(connection)
            except Exception as exc:  # a bug must not end the schedules for good either
                if self.leading:
                    level, line, trace = loss_report(self.app.queue, exc, leading=True)
                    log.log(level, "%s", line, exc_info=exc if trace else None)
                else:
                    self._note(exc)
            finally:
                self._step_down()
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(5):
                        await connection.close()
            await asyncio.sleep(self.retry_interval)

    def _note(self, exc: BaseException) -> None:
        """Log why contending failed, once until the reason changes (it is retried
        every second: a broker down for an hour would otherwise fill the log)."""
        said = f"{type(exc).__name__}: {exc}"
        if said != self._last_error:
            self._last_error = said
            level, line, _ = loss_report(self.app.queue, exc, leading=False)
            log.log(level, "%s", line)

    def _step_down(self) -> None:
        self.leading = False
        self.metrics.leading.set(0)

    async def _session(self, connection: AbstractConnection) -> None:
        channel = await connection.channel(publisher_confirms=False)
        await channel.declare_exchange(self.app.exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        fresh = not await fence.progress_exists(connection, plan.progress_queue(self.app.queue))
        await channel.declare_queue(
            plan.progress_queue(self.app.queue),
            durable=True,
            arguments=plan.progress_arguments(self.app.queue_type),
        )
        await channel.close()
        while not await self._take_lease(connection):
            await asyncio.sleep(self.retry_interval)
        if self._yielded:
            log.info("another leader took the schedules of %s; standing by", self.app.queue)
            await fence.await_quiet(connection, plan.progress_queue(self.app.queue))
        await self._lead(connection, fresh=fresh)

    async def _take_lease(self, connection: AbstractConnection) -> bool:
        channel = await connection.channel(publisher_confirms=False)
        try:
            await channel.declare_queue(
                plan.lease_queue(self.app.queue), exclusive=True, auto_delete=True
            )
        except aiormq.exceptions.ChannelLockedResource:
            return False  # another connection holds it (the broker closed this channel)
        return True

    async def _lead(self, connection: AbstractConnection, *, fresh: bool = False) -> None:
        self._connection = connection
        self._written = None
        channel = await connection.channel(publisher_confirms=False)
        tx = await channel.get_underlay_channel()
        await tx.tx_select()
        self.leading = True
        self._last_error = None
        self.metrics.leading.set(1)
        self.metrics.takeovers.inc()
        now = self.clock()
        found = await fence.read_at_takeover(tx, plan.progress_queue(self.app.queue), fresh=fresh)
        if not found.records and not fresh:
            log.warning(
                "the progress record of %s is not there; its schedules start from now",
                self.app.queue,
            )
        self._yielded = False
        progress = plan.merge(found.records)
        self._published = dict(progress.published)
        through = dict(progress.ticks)
        # (instant in UTC, name, tick): two ticks of one zone would compare as wall times
        heads: list[tuple[datetime, str, datetime]] = []
        ticks: dict[str, Iterator[datetime]] = {}
        for name, schedule in self.app.schedules.items():
            decision = plan.catch_up(schedule, through.get(name), now)
            if decision.skipped:
                self.metrics.skipped.labels(name, "catch_up").inc(decision.skipped)
                log.warning(
                    "schedule %s: %d missed tick(s) skipped (catch_up=%r)",
                    name,
                    decision.skipped,
                    schedule.catch_up,
                )
            if not decision.ticks:  # nothing owed before `after`: record that now
                through[name] = decision.after
            ticks[name] = _forever(schedule, decision.ticks, decision.after)
            heapq.heappush(heads, _head(next(ticks[name]), name))
        self._progress = plan.Progress(ticks=through)
        # the first commit compacts what was read into one record, held by us no longer
        await self._commit(channel, [], acks=found.tags)
        log.info(
            "leading the schedules of %s (%s) as %s",
            self.app.queue,
            ", ".join(self.app.schedules) or "none",
            self.name,
        )
        loop = asyncio.get_running_loop()
        while True:
            _, name, tick = heads[0]
            wait = (tick - self.clock()).total_seconds()
            renew = fence.RENEW - (loop.time() - self._committed_at)
            if wait > 0 and renew > 0:
                await asyncio.sleep(min(wait, renew, MAX_SLEEP))
                continue
            if wait > 0:  # no tick due: renew the hold (the fence, and a record)
                await self._commit(channel, [], acks=[])
                continue
            await self._tick(channel, self.app.schedules[name], tick)
            heapq.heapreplace(heads, _head(next(ticks[name]), name))

    async def _tick(self, channel: AbstractChannel, schedule: Schedule, tick: datetime) -> None:
        assert self._connection is not None
        paused = await pause.is_paused(self._connection, self.app.queue, schedule.name)
        if paused:  # skipped, and recorded as handled: resuming does not catch up
            self.metrics.skipped.labels(schedule.name, "paused").inc()
            log.info("schedule %s: paused, its tick at %s skipped", schedule.name, tick)
        messages = None if paused else await self._messages(schedule, tick)
        through = dict(self._progress.ticks)
        through[schedule.name] = tick
        self._progress = plan.Progress(ticks=through)
        if messages is not None:
            self._published[schedule.name] = tick
        sends = [
            tick_tx.Send(schedule=schedule.name, tick=tick, index=i, message=m)
            for i, m in enumerate(messages or [])
        ]
        await self._commit(channel, sends, acks=[])
        if messages is None:
            return
        lateness = plan.lateness(tick, self.clock())
        self.metrics.published.labels(schedule.name).inc()
        self.metrics.lateness.labels(schedule.name).observe(lateness)
        if lateness > plan.LATE_AFTER:
            self.metrics.late.labels(schedule.name).inc()
        log.debug("schedule %s: tick %s published (%.3f s late)", schedule.name, tick, lateness)

    async def _messages(self, schedule: Schedule, tick: datetime) -> list[Message] | None:
        """The tick's messages from the schedule's function; None if it failed."""
        try:
            if schedule.is_async:
                result = await schedule.fn(tick)
            else:
                result = await asyncio.to_thread(schedule.fn, tick)
            return tick_tx.messages_of(result)
        except Exception:
            log.exception(
                "schedule %s: its function failed for the tick at %s: tick skipped",
                schedule.name,
                tick.isoformat(),
            )
            self.metrics.skipped.labels(schedule.name, "error").inc()
            return None

    async def _commit(
        self,
        channel: AbstractChannel,
        sends: list[tick_tx.Send],
        *,
        acks: list[int],
    ) -> None:
        """The tick's messages, the progress record and the acks of the records read at
        takeover, in one transaction (:func:`rabbitq.schedule.tick.commit`); after the
        first commit, only if the fence holds (:func:`fence.take_back`), its record acked in it."""
        tx = await channel.get_underlay_channel()
        if self._written is not None:
            try:
                tag = await fence.take_back(
                    tx, plan.progress_queue(self.app.queue), leader=self.name, written=self._written
                )
            except fence.LeaseLost as exc:
                self._yielded = exc.taken
                raise
            acks = [*acks, tag]
        record = plan.Progress(
            ticks=self._progress.ticks,
            published=self._published,
            leader=self.name,
            written=self.clock(),
        )
        try:
            await tick_tx.commit(
                tx,
                exchange=self.app.exchange,
                progress_queue=plan.progress_queue(self.app.queue),
                sends=sends,
                record=record,
                acks=acks,
                cipher=cipher_of(self.app),  # an encrypted app's ticks: docs/privacy.md
            )
        except Exception:  # (a cancelled commit is not a doubt: the next leader reads it)
            if sends:  # a renewal or a takeover's record puts no tick in doubt
                self.metrics.unconfirmed.inc()
            raise
        self._written = record.written
        self._committed_at = asyncio.get_running_loop().time()


async def beside(main: Awaitable[T], scheduler: Scheduler | None) -> T:
    """Await ``main`` (a worker's run) with ``scheduler`` running beside it, if any;
    stop the scheduler (releasing its lease) when ``main`` ends."""
    if scheduler is None:
        return await main
    task = asyncio.create_task(scheduler.run(), name="rabbitq scheduler")
    task.add_done_callback(_report)
    try:
        return await main
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _report(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the scheduler stopped", exc_info=task.exception())
