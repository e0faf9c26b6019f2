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
it wrote last (:func:`rabbitq.schedule.plan.fence`); it renews it every :data:`RENEW`
seconds. A leader that finds another's record publishes nothing, steps down
(:class:`LeaseLost`) and stands by until the record has stood still for
:data:`LEASE_PERIOD`. Why this holds: docs/schedules.md, "Through a network partition".
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
from pamqp.commands import Basic

from .._amqp.connection import connect_once
from ..crypto.codec import cipher_of
from ..errors import BrokerUnavailable
from ..message import Message
from ..settings import TLS
from . import pause, plan
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
# The fence (docs/schedules.md, "Through a network partition"): before every commit the
# leader takes the progress record back from its quorum queue, and commits only if it is
# the one it wrote last. It commits at least every RENEW seconds, ticks or not.
RENEW = 1.0
# A scheduler that lost the fence to another leader leads again only once the record
# has stood still this long (its writer stopped renewing): no ping-pong of two leaders.
LEASE_PERIOD = 3.0
FENCE_TIMEOUT = 5.0  # a read of the record must answer within this, or the leader steps down
FENCE_TRIES = 5  # a record absent (another reader has it for a moment): looks, 0.2 s apart
FENCE_RETRY = 0.2
# At takeover, a record absent from an existing progress queue is waited for this long:
# a leader's commit in flight holds it until it completes or times out.
ABSENT_AT_TAKEOVER = 15.0


class LeaseLost(Exception):
    """The fence failed: another leader committed since this one's last commit, or the
    record could not be taken back."""


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
    LeaseLost,
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
        fresh = not await self._progress_exists(connection)
        await channel.declare_queue(
            plan.progress_queue(self.app.queue),
            durable=True,
            arguments=plan.progress_arguments(self.app.queue_type),
        )
        await channel.close()
        while not await self._take_lease(connection):
            await asyncio.sleep(self.retry_interval)
        if self._yielded:
            await self._await_quiet(connection)
        await self._lead(connection, fresh=fresh)

    async def _progress_exists(self, connection: AbstractConnection) -> bool:
        """Whether the progress queue exists already (a passive declare, on a channel
        of its own: a missing queue closes it). A new one has no record to wait for."""
        channel = await connection.channel(publisher_confirms=False)
        try:
            await channel.declare_queue(plan.progress_queue(self.app.queue), passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        with contextlib.suppress(Exception):
            await channel.close()
        return True

    async def _await_quiet(self, connection: AbstractConnection) -> None:
        """Watch the progress record (each read returned at once) until it has stood
        still for :data:`LEASE_PERIOD`: the leader that took the schedules from this
        one has stopped renewing them."""
        log.info("another leader took the schedules of %s; standing by", self.app.queue)
        loop = asyncio.get_running_loop()
        seen: object = object()
        since = loop.time()
        while True:
            channel = await connection.channel(publisher_confirms=False)
            underlay = await channel.get_underlay_channel()
            async with asyncio.timeout(FENCE_TIMEOUT):
                found = await tick_tx.read_progress(underlay, plan.progress_queue(self.app.queue))
            for tag in found.tags:
                await underlay.basic_reject(tag, requeue=True)
            await channel.close()
            writer = plan.writer_of(plan.merge(found.records) if found.records else None)
            now = loop.time()
            if writer != seen:
                seen, since = writer, now
            elif plan.lease_expired(since, now, LEASE_PERIOD):
                return
            await asyncio.sleep(RENEW / 2)

    async def _read_at_takeover(
        self, tx: aiormq.abc.AbstractChannel, *, fresh: bool
    ) -> tick_tx.Found:
        """Every progress record, held until the first commit. An existing queue
        without one is looked at again for up to :data:`ABSENT_AT_TAKEOVER`: a leader's
        commit in flight holds its record until it completes or fails."""
        queue = plan.progress_queue(self.app.queue)
        deadline = asyncio.get_running_loop().time() + (0.0 if fresh else ABSENT_AT_TAKEOVER)
        while True:
            async with asyncio.timeout(FENCE_TIMEOUT):
                found = await tick_tx.read_progress(tx, queue)
            if found.records or fresh:
                return found
            if asyncio.get_running_loop().time() >= deadline:
                log.warning(
                    "the progress record of %s is not there; its schedules start from now",
                    self.app.queue,
                )
                return found
            await asyncio.sleep(0.5)

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
        found = await self._read_at_takeover(tx, fresh=fresh)
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
            renew = RENEW - (loop.time() - self._committed_at)
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
        first commit, only if the fence holds (:meth:`_fence`), its record acked in it."""
        tx = await channel.get_underlay_channel()
        if self._written is not None:
            acks = [*acks, await self._fence(tx)]
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
            self.metrics.unconfirmed.inc()
            raise
        self._written = record.written
        self._committed_at = asyncio.get_running_loop().time()

    async def _fence(self, tx: aiormq.abc.AbstractChannel) -> int:
        """Take the progress record back (unacked, on the transaction's channel) and
        return its delivery tag if it is the one this leader wrote last; raise
        :class:`LeaseLost` otherwise. The record lives in a quorum queue: a get is a
        Raft command, so of two leaders only one can hold the latest record, and
        whoever commits after the other finds the other's record and steps down."""
        queue = plan.progress_queue(self.app.queue)
        for _ in range(FENCE_TRIES):
            async with asyncio.timeout(FENCE_TIMEOUT):
                got = await tx.basic_get(queue, no_ack=False)
            if isinstance(got.delivery, Basic.GetOk):
                assert got.delivery.delivery_tag is not None
                record = plan.decode_progress(got.body)
                if plan.fence(record, leader=self.name, written=self._written) == "held":
                    return got.delivery.delivery_tag
                self._yielded = record is not None
                who = record.leader if record is not None and record.leader else "someone else"
                raise LeaseLost(
                    f"{who} committed the schedules of {self.app.queue} since this leader"
                )
            await asyncio.sleep(FENCE_RETRY)
        raise LeaseLost(f"the progress record of {self.app.queue} stayed away (held elsewhere)")


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
