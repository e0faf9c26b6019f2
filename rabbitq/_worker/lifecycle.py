"""The worker: consume one queue with prefetch-bounded concurrency and settle every
delivery safely with the broker.

The order of operations is the guarantee: a retry or DLQ copy is published and
*confirmed* before the original is acked; if the copy cannot be confirmed the original
is returned to the queue (nack, requeue). A lost connection leaves every unacked
delivery to the broker, which redelivers it. Nothing is acked that is not safe. Acks
are coalesced by :mod:`rabbitq._worker.acks`, handed a delivery once its outcome is
safe. The worker only wires: :class:`~rabbitq._worker.consumer.Consumer` owns the
consumer, why it is paused and its readiness; :class:`~rabbitq._worker.copies.CopyStore`
stores copies; :class:`~rabbitq._worker.keeper.Keeper` keeps the topology.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Sequence

import aiormq.abc
from aio_pika.abc import AbstractRobustConnection

from .._amqp import brokers, orphans
from .._amqp.blocked import BlockedWatch
from .._amqp.connection import connect
from .._amqp.start_retry import until_started
from .._amqp.topology import Topology, declare
from ..app import App
from ..crypto.codec import cipher_of
from ..crypto.results import sealed_chords
from ..effects.followups import FollowUp
from ..effects.sender import send_follow_ups
from ..effects.store import close_stores
from ..errors import ConfigurationError, HandlerNotStarted
from ..hooks import UNKNOWN, Hooks, combine
from ..job import Job, Next
from ..outcome import REQUEUE, Outcome
from ..settings import TLS, Settings, redact_url
from ..tracing.base import NO_DELIVERY
from . import consumer_args
from .acks import Acker
from .admission import Admission
from .batching import Batcher
from .breaker_guard import BreakerGuard
from .consumer import BROKER_BLOCKED, CLOSE_TIMEOUT, NOT_CONSUMING, STOPPING, Consumer
from .consumer_timeout import on_channel_closed
from .copies import CopyStore, own_arguments, own_targets
from .delivery import Incoming
from .dispatch import new_job, resolve_type
from .handler_pool import HandlerPool, report_abandoned, report_returned
from .keeper import Keeper
from .ordering import Ordering
from .settle import REQUEUE_BACKOFF, Settler
from .spans import trace_delivery
from .stages import for_worker
from .stopping import Unsettled, drain, run_until_stopped

log = logging.getLogger("rabbitq.worker")

DEFAULT_GRACE_PERIOD = 30.0


class Worker:
    """Runs an :class:`App`'s handlers against its queue until stopped.

    ``await worker.run()`` blocks until :meth:`stop` is called (or SIGTERM/SIGINT,
    with ``install_signal_handlers=True``), then drains: no new deliveries, in-flight
    handlers get ``grace_period`` seconds, the rest are returned to the queue.
    ``coalesce_acks=False`` acks every delivery on its own (slower; for comparison).
    """

    def __init__(
        self,
        app: App,
        *,
        url: str | None = None,
        prefetch: int | None = None,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        hooks: Hooks | list[Hooks] | None = None,
        sync_workers: int | None = None,
        tls: TLS | None = None,
        consumer_timeout: float | None = None,
        coalesce_acks: bool = True,
        start_wait: float | None = None,
    ) -> None:
        if not app.handlers:
            raise ConfigurationError(f"{app!r} has no handlers: register one with @app.handler")
        if app.partitions and app.queue == app.partition_base:
            raise ConfigurationError(
                f"App(partitions={app.partitions}) runs with PartitionedWorker(app) (as "
                "`rabbitq worker` does), or one partition with Worker(app.partition(i))"
            )
        if app.priorities > 1 and app.lane is None:  # one Worker per lane: worker.laned
            raise ConfigurationError("App(priorities=N) runs with PriorityWorker(app)")
        self.app = app
        self.url, self.start_wait = app.resolved_url(url), start_wait
        self.tls = tls or app.tls
        self.consumer_timeout = (  # the broker's ack timeout, if known (worker.consumer_timeout)
            Settings.from_env().consumer_timeout if consumer_timeout is None else consumer_timeout
        )
        self.prefetch = prefetch or app.prefetch
        self.grace_period = grace_period
        self.hooks = combine(hooks)
        self.topology: Topology = app.topology()
        self._handlers = app.handlers
        self._queue_name = app.queue
        self._chords = sealed_chords(app)  # members counted, results kept (App(status=...))
        self._cipher = cipher_of(app)  # an encrypted app's follow-ups are sealed with it
        self._executor = HandlerPool(
            sync_workers or self.prefetch,
            abandoned=functools.partial(report_abandoned, self.hooks, self._queue_name),
            returned=functools.partial(report_returned, self.hooks, self._queue_name),
        )
        self.keeper = Keeper(
            self.topology,
            self.hooks,
            declaring=lambda: self.consumer.channel,
            connection=lambda: self._connection,
        )
        self.consumer = Consumer(
            self._queue_name, self._on_delivery, self.hooks, redeclare=self.keeper.redeclare
        )
        self._copies = CopyStore(
            self._queue_name,
            own_targets(self.topology),
            channel=lambda: self.keeper.copy_channel,
            redeclare=self.keeper.redeclare,
            consumer=self.consumer,
            renew=self.keeper.renew_copy_channel,
            hooks=self.hooks,
            arguments=own_arguments(self.topology),
        )
        self._settler = Settler(self._queue_name, self.topology, self._copies, self.hooks)
        # ordered_by handlers: one message of a key at a time, retries held (docs/ordering.md)
        self.ordering = Ordering.wanted(  # self: the connection where blocked keys are kept
            self._queue_name, self._handlers, self.hooks, self.consumer_timeout, self
        )
        self.consume_args: dict[str, object] = {}  # basic.consume's, besides consumer_args'
        self._blocked = BlockedWatch(self._on_blocked)
        self._watching: asyncio.Task[None] | None = None
        self._connection: AbstractRobustConnection | None = None
        self._coalesce_acks = coalesce_acks
        self._acker: Acker | None = None  # the acks of the current consume channel
        self._tasks = Unsettled(self.hooks, self._queue_name)  # every delivery not yet settled
        self._handling: set[asyncio.Task[None]] = set()  # those still in their handler
        # Limited handlers wait for their turn without a handler slot (rabbitq.ratelimit).
        self.admission = Admission.for_app(app, prefetch=self.prefetch, hooks=self.hooks)
        self.tracing = app.tracing
        self.batches = Batcher(self._handlers, self._queue_name, self.hooks, prefetch=self.prefetch)
        self._stop = asyncio.Event()
        self.breakers = BreakerGuard.wanted(
            self._queue_name, self._handlers, consumer=self.consumer, hooks=self.hooks
        )
        # One stage list for every delivery, built once (worker/stages.py lists them).
        self.pipeline = for_worker(
            self._handlers.values(),
            before=(self.admission or None, self._running, self.breakers, self.ordering),
            middleware=app.middleware,
            capabilities=app.delivery_stages,
            batches=self.batches,
            send=self._send_follow_ups,
            outbox=app.outbox,
            executor=self._executor,
            chords=self._chords,
        )

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Connect, declare, consume: all tried again while the broker is unreachable or goes
        meanwhile, for ever or ``start_wait`` seconds (0: one try; start_retry)."""
        log.info("connecting to %s", redact_url(self.url))
        await until_started(
            self._start_once, url=self.url, wait=self.start_wait, clean_up=self._close_connection
        )
        self._watching = asyncio.create_task(self._blocked.run(lambda: self._connection))
        types = ", ".join(sorted(self._handlers))
        log.info("consuming %r on %s (prefetch %d, types: %s)",
                 self._queue_name, redact_url(self.url), self.prefetch, types)

    async def _start_once(self) -> None:
        self._connection = await connect(
            self.url, name=f"rabbitq worker {self._queue_name}", tls=self.tls
        )
        self._connection.close_callbacks.add(self._on_connection_lost)
        self._connection.reconnect_callbacks.add(self._on_reconnected)
        self.hooks.connection_changed(True)
        facts = brokers.log_broker(self._connection)  # then the partition's x-priority, if any
        self.consumer.arguments = {**consumer_args.at_start(self, facts), **self.consume_args}
        channel = await self.consumer.open(self._connection, self.admission.broker_prefetch)
        self.hooks.prefetch_changed(self._queue_name, self.prefetch)
        await self.keeper.open_copy_channel()
        await declare(channel, self.topology)  # on the robust channel: again on reconnect
        channel.close_callbacks.add(on_channel_closed)  # not before
        await orphans.report(self._connection, self.topology, log, app_spec=self.app.loaded_as)
        await self.consumer.start()

    @property
    def connection(self) -> AbstractRobustConnection | None:
        """The broker connection while the worker runs (for sampling queue depths)."""
        return self._connection

    @property
    def ready(self) -> asyncio.Event:
        """Set while the worker is ready (:meth:`health` is None)."""
        return self.consumer.ready

    def health(self) -> str | None:
        """Why the worker is not ready (one line for ``/readyz``), or None; any thread."""
        return self.consumer.health()

    def stop(self) -> None:
        """Ask :meth:`run` to drain and return. Safe to call from a signal handler."""
        self._stop.set()

    async def run(self, *, install_signal_handlers: bool = False) -> None:
        """Start, run until stopped, then drain and close."""
        await run_until_stopped(self, self._stop, install_signal_handlers=install_signal_handlers)

    async def shutdown(self) -> None:
        """Stop taking deliveries, let handlers finish within the grace period, requeue
        the rest, close. Idempotent."""
        if self.consumer.stopping:
            return
        self.consumer.pause(STOPPING, NOT_CONSUMING)
        # Deliveries waiting for a probe's verdict or for their limits go back; partial
        # batches run now, within the grace period.
        self.pipeline.stop()
        await self.consumer.stop()
        # Settling is short, unless the broker blocks us or holds copies back: those are
        # cancelled; unsettled deliveries go back when the connection closes.
        settle = 1.0 if self.consumer.blocked or self._copies.held else 10.0
        await drain(self._tasks, self._handling, self.grace_period, settle)
        if self._watching:
            self._watching.cancel()
        await self._flush_acks(0.5 if self.consumer.blocked else CLOSE_TIMEOUT)
        connected = self._connection is not None
        await self._close_connection()
        self._executor.shutdown()
        await self.pipeline.aclose()
        # after the handlers (a store opens again on its next use), and before the status
        # records still queued (App(status=...)) are flushed
        await close_stores([*(h.idempotency for h in self._handlers.values()), self._chords])
        await self.app.tracing.flush()
        if connected:  # a worker that never connected just reports the error
            log.info("worker for %r stopped", self._queue_name)

    def freeze(self) -> None:
        """Start no delivery any more (each stage's ``freeze``: an ordered key's next
        message stays held here, unstarted, until the connection closes)."""
        self.pipeline.freeze()

    async def drain_then_close(self) -> None:
        """Stop in order (a partition's worker, worker.partitioned): start nothing more,
        let the handlers that run finish and settle within the grace period, send the
        acks, then close the connection, which gives the broker back every delivery
        still held, in queue order, and the consumer with them. Cancelling the consumer
        first (what :meth:`shutdown` does) would let another process start later
        messages of a key while an earlier one still runs here. :meth:`shutdown` after
        it only tidies up."""
        self.freeze()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.grace_period):
                await self.pipeline.idle()  # no handler of a held stage runs
                settling = self._tasks - self._handling  # out of the list: acks, copies
                if settling:
                    await asyncio.wait(settling)
        await self._flush_acks(5.0)
        await self._close_connection()
        for task in list(self._tasks):  # never started: returned by the close
            task.cancel()

    async def _flush_acks(self, limit: float) -> None:
        if self._acker is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(limit):
                    await self._acker.flush()  # the acks still waiting to be coalesced

    def _on_blocked(self, why: str | None) -> None:
        self.hooks.connection_blocked(why)
        if why:
            self.consumer.pause(BROKER_BLOCKED, why)
        else:
            self.consumer.resume(BROKER_BLOCKED)

    async def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close_callbacks.discard(self._on_connection_lost)
            try:
                async with asyncio.timeout(0.5 if self.consumer.blocked else CLOSE_TIMEOUT):
                    await self._connection.close()
            except TimeoutError:
                # A blocked broker does not read our close: the process's exit (or the
                # garbage collector) closes the socket; unsettled deliveries go back.
                log.warning("the broker did not answer the close (blocked?)")
            except Exception as exc:
                log.warning("error while closing the connection: %s", exc)
            self._connection = None
            self.hooks.connection_changed(False)

    def _on_connection_lost(self, _sender: object, exc: BaseException | None) -> None:
        if self.consumer.stopping:
            return
        self.hooks.connection_changed(False)  # first: the metrics count it as a loss
        self.consumer.connection_changed(False)
        log.warning("connection to RabbitMQ lost (%s); reconnecting", exc or "closed")

    def _on_reconnected(self, _sender: object) -> None:
        # Ready again once the consumer is back (it consumes when the channel reopens).
        self.hooks.connection_changed(True)
        self.consumer.connection_changed(True)
        log.info("reconnected to RabbitMQ")

    # -- one delivery ------------------------------------------------------------

    def _acker_for(self, delivery: Incoming) -> Acker:
        """The acker of the delivery's channel: delivery tags restart on a new channel."""
        channel = delivery.channel
        if self._acker is None or self._acker.channel is not channel:
            self._acker = Acker(
                channel, coalesce=self._coalesce_acks, batch=max(1, min(64, self.prefetch // 4))
            )
        return self._acker

    def _on_delivery(self, message: aiormq.abc.DeliveredMessage) -> None:
        """Called as the delivery's frames are read (no task of aiormq's around it:
        rabbitq._worker.delivery.deliver_directly); it starts the delivery's own task."""
        delivery = Incoming(message)
        acker = self._acker_for(delivery)
        if self.consumer.stopping:
            # Arrived between basic.cancel and its confirmation: give it back.
            type_name = resolve_type(delivery, self._queue_name)
            self._track(asyncio.create_task(self._settler.nack(delivery, type_name, acker)))
            return
        # The handler runs in a task of our own, never in one of aiormq's: aiormq cancels
        # its tasks when the channel closes, and a lost connection must not interrupt a
        # handler half-way through sending an email (its ack fails; it is redelivered).
        job = new_job(self._handlers, self._queue_name, delivery)
        settled = [done for arrive in self.pipeline.arrivals if (done := arrive(job))]
        task = self._track(asyncio.create_task(self._handle(job, acker)))
        for done in settled:  # the next of its key may go (worker.ordering)
            task.add_done_callback(done)
        self._handling.add(task)

    def _track(self, task: asyncio.Task[None]) -> asyncio.Task[None]:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _handle(self, job: Job, acker: Acker) -> None:
        delivery, type_name = job.delivery, job.type_name
        assert isinstance(delivery, Incoming)
        self.hooks.received(self._queue_name, type_name if job.handler else UNKNOWN)
        span = NO_DELIVERY
        if self.tracing.enabled:
            span = trace_delivery(self.tracing, delivery, self._queue_name, type_name, job.attempt)
        try:
            with span.activate():
                outcome = await self.pipeline.run(job)
        except asyncio.CancelledError:  # shutdown: while waiting, or after the grace period
            await self._settler.nack(delivery, type_name, acker)
            span.end("requeued")
            raise
        except HandlerNotStarted as exc:  # no thread, and no retry tier to wait in
            log.warning("message %s not run: %s", delivery.message_id or "-", exc)
            await asyncio.sleep(REQUEUE_BACKOFF)
            await self._settler.nack(delivery, type_name, acker)
            return
        finally:
            self._handling.discard(asyncio.current_task())
        if outcome.decision is REQUEUE:  # a breaker that is open, a middleware's "not now"
            await self._settler.nack(delivery, type_name, acker)
            span.end("requeued")
            return
        await self._settler.settle(delivery, outcome, type_name, acker, span)

    async def _running(self, job: Job, call_next: Next) -> Outcome:
        """The worker's own stage, after admission: the delivery is in its handler (for
        the drain and the in-handler metrics) until the rest of the list returns."""
        self.hooks.handler_started(self._queue_name)
        if job.delivery.redelivered:
            log.info(
                "redelivered message %s (it may have been handled before: at-least-once)",
                job.delivery.message_id or "(no message_id)",
            )
        try:
            return await call_next(job)
        finally:  # out of its handler now (and again in _handle: it may never get here)
            self._handling.discard(asyncio.current_task())
            self.hooks.handler_finished(self._queue_name)

    async def _send_follow_ups(self, follow_ups: Sequence[FollowUp]) -> None:
        """Publish a succeeded handler's follow-ups, confirmed, before its ack."""
        assert (channel := self.keeper.copy_channel) is not None
        app = self.app
        await send_follow_ups(channel, app.exchange, follow_ups, self.hooks, app.tracing,
                              cipher=self._cipher)  # fmt: skip
