"""The worker: consume one queue with prefetch-bounded concurrency and settle every
delivery safely with the broker.

The order of operations is the guarantee: a retry or DLQ copy is published and
*confirmed* before the original is acked; if the copy cannot be confirmed the original
is returned to the queue (nack, requeue). A lost connection leaves every unacked
delivery to the broker, which redelivers it. Nothing is acked that is not safe.
Acks are coalesced into multiple-acks by :mod:`rabbitq.worker.acks`, which is handed a
delivery only once its outcome is safe.

The worker consumes on aiormq's channel under aio-pika's robust one (see
:mod:`rabbitq.worker.delivery` for why), so it consumes again itself whenever aio-pika
reopens that channel (a reconnect, a channel error) or the broker cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import Sequence
from typing import Any

import aiormq.abc
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection

from .. import brokers, orphans
from ..amqp import properties
from ..amqp.blocked import BlockedWatch
from ..amqp.connection import RECONNECT_INTERVAL, connect
from ..app import App
from ..breaker import OPEN, BreakerGuard
from ..effects.followups import FollowUp
from ..effects.sender import send_follow_ups
from ..errors import ConfigurationError, HandlerNotStarted, PublishError
from ..hooks import CONSUMER_CANCELLED, UNKNOWN, Hooks, combine
from ..retry import DeadLetter, Retry
from ..settings import TLS, Settings, redact_url
from ..topology import Topology, declare
from ..tracing.base import NO_DELIVERY, DeliverySpan
from . import dispatch, limits, outcome_log
from .acks import Acker
from .admission import Admission
from .copies import CopyStore, copy_of, own_targets, report_copied
from .delivery import Incoming
from .dispatch import Outcome, limit_failure, process, resolve_type, trace_delivery
from .handler_pool import HandlerPool, report_abandoned, report_returned
from .keeper import Keeper
from .stopping import unless_stopped

log = logging.getLogger("rabbitq.worker")

DEFAULT_GRACE_PERIOD = 30.0
CLOSE_TIMEOUT = 5.0  # closing waits at most this long (0.5 s while the broker blocks us)
# After a copy failed (connection lost), wait this long before returning the message.
REQUEUE_BACKOFF = 1.0


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
    ) -> None:
        if not app.handlers:
            raise ConfigurationError(f"{app!r} has no handlers: register one with @app.handler")
        self.app = app
        self.url = app.resolved_url(url)
        self.tls = tls or app.tls
        # the broker's delivery-ack timeout, if known (see rabbitq.worker.limits)
        self.consumer_timeout = (
            Settings.from_env().consumer_timeout if consumer_timeout is None else consumer_timeout
        )
        self.prefetch = prefetch or app.prefetch
        self.grace_period = grace_period
        self.hooks = combine(hooks)
        self.topology: Topology = app.topology()
        self._handlers = app.handlers
        self._queue_name = app.queue
        self._executor = HandlerPool(
            sync_workers or self.prefetch,
            abandoned=functools.partial(report_abandoned, self.hooks, self._queue_name),
            returned=functools.partial(report_returned, self.hooks, self._queue_name),
        )
        self.keeper = Keeper(self.topology, self.hooks, declaring=lambda: self._consume_channel,
                             connection=lambda: self._connection)  # fmt: skip
        self._copies = CopyStore(
            self._queue_name, own_targets(self.topology),
            channel=lambda: self.keeper.copy_channel, redeclare=self.keeper.redeclare,
            pause=self._cancel_consumer, resume=lambda: self._resume(delay=0),
            stopping=lambda: self._stopping, renew=self.keeper.renew_copy_channel,
            hooks=self.hooks,
        )  # fmt: skip
        self._blocked = BlockedWatch(self.hooks.connection_blocked)
        self._watching: asyncio.Task[None] | None = None
        self._connection: AbstractRobustConnection | None = None
        self._consume_channel: AbstractRobustChannel | None = None
        # The aiormq channel we consume on, and our consumer's tag there.
        self._consuming_on: aiormq.abc.AbstractChannel | None = None
        self._consumer_tag: str | None = None
        self._resuming: asyncio.Task[None] | None = None
        self._coalesce_acks = coalesce_acks
        self._acker: Acker | None = None  # the acks of the current consume channel
        self._tasks: set[asyncio.Task[None]] = set()  # every delivery not yet settled
        self._handling: set[asyncio.Task[None]] = set()  # those still in their handler
        # Limited handlers wait for their turn without a handler slot (rabbitq.ratelimit).
        self.admission = Admission.for_app(app, prefetch=self.prefetch, hooks=self.hooks)
        self.tracing = app.tracing
        self._stop = asyncio.Event()
        self._stopping = False
        self.ready = asyncio.Event()
        breakers = {name: h.breaker for name, h in self._handlers.items() if h.breaker}
        self.breakers = (
            BreakerGuard(
                self._queue_name,
                breakers,
                pause=self._cancel_consumer,
                resume=self._consume,
                hooks=self.hooks,
            )
            if breakers
            else None
        )

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Connect, declare the topology and start consuming."""
        log.info("connecting to %s", redact_url(self.url))
        self._connection = await connect(
            self.url, name=f"rabbitq worker {self._queue_name}", tls=self.tls
        )
        self._connection.close_callbacks.add(self._on_connection_lost)
        self._connection.reconnect_callbacks.add(self._on_reconnected)
        self.hooks.connection_changed(True)
        limits.check_timeouts(self._handlers, self.consumer_timeout, self.admission.broker_prefetch)
        brokers.log_broker(self._connection)  # the broker version, and what it means here
        try:
            self._consume_channel = await self._connection.channel(publisher_confirms=False)
            await self._consume_channel.set_qos(prefetch_count=self.admission.broker_prefetch)
            self.hooks.prefetch_changed(self._queue_name, self.prefetch)
            await self.keeper.open_copy_channel()
            # Declared on the robust channel, so aio-pika re-declares it on reconnect.
            await declare(self._consume_channel, self.topology)
            self._consume_channel.close_callbacks.add(limits.on_channel_closed)  # not before
            await orphans.report(self._connection, self.topology, log)
            await self._consume()
            self._consume_channel.reopen_callbacks.add(self._on_reopened)
        except BaseException:
            await self._close_connection()
            raise
        self.hooks.consuming_changed(self._queue_name, True)
        self.ready.set()
        self._watching = asyncio.create_task(self._blocked.run(lambda: self._connection))
        log.info(
            "consuming %r on %s (prefetch %d, types: %s)",
            self._queue_name,
            redact_url(self.url),
            self.prefetch,
            ", ".join(sorted(self._handlers)),
        )

    @property
    def connection(self) -> AbstractRobustConnection | None:
        """The broker connection while the worker runs (for sampling queue depths)."""
        return self._connection

    def stop(self) -> None:
        """Ask :meth:`run` to drain and return. Safe to call from a signal handler."""
        self._stop.set()

    async def run(self, *, install_signal_handlers: bool = False) -> None:
        """Start, run until stopped, then drain and close."""
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            if await unless_stopped(self.start(), self._stop):  # SIGTERM while connecting
                await self._stop.wait()
        finally:
            await self.shutdown()
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stop.is_set():
            log.warning("%s again: still draining (grace period %gs)", sig.name, self.grace_period)
            return
        log.info("%s received: draining", sig.name)
        self.stop()

    async def shutdown(self) -> None:
        """Stop taking deliveries, let handlers finish within the grace period, requeue
        the rest, close. Idempotent."""
        if self._stopping:
            return
        self._stopping = True
        self.ready.clear()
        if self.breakers is not None:
            self.breakers.close()  # deliveries waiting for a probe's verdict go back
        await self._cancel_consumer()
        self.hooks.consuming_changed(self._queue_name, False)
        self.admission.cancel_waiting()  # not started: back to the queue now
        if self._tasks:
            log.info(
                "waiting up to %gs for %d in-flight handler(s)", self.grace_period, len(self._tasks)
            )
            await asyncio.wait(list(self._tasks), timeout=self.grace_period)
        late = [t for t in self._handling if not t.done()]
        if late:
            log.warning("grace period over: returning %d message(s) to the queue", len(late))
            for task in late:
                task.cancel()  # the task nacks its delivery with requeue
        if self._tasks:
            # Settling is short, unless the broker blocks us or holds copies back: those
            # are cancelled; unsettled deliveries go back when the connection closes.
            settle = 1.0 if self._blocked.blocked or self._copies.held else 10.0
            await asyncio.wait(list(self._tasks), timeout=settle)
            for task in [t for t in self._tasks if not t.done()]:
                task.cancel()
        if self._watching:
            self._watching.cancel()
        if self._acker is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5 if self._blocked.blocked else CLOSE_TIMEOUT):
                    await self._acker.flush()  # the acks still waiting to be coalesced
        connected = self._connection is not None
        await self._close_connection()
        self._executor.shutdown()
        await self.admission.close()
        await dispatch.close_stores(self._handlers)  # after the handlers; reopened on next use
        if connected:  # a worker that never connected just reports the error
            log.info("worker for %r stopped", self._queue_name)

    async def _consume(self) -> None:
        """basic.consume on the robust channel's current aiormq channel, unless the
        worker is stopping or a circuit breaker holds the queue paused."""
        if self._stopping or (self.breakers is not None and self.breakers.state == OPEN):
            return
        if self._copies.held:
            return  # resumed when no message is held any more
        assert self._consume_channel is not None
        channel = await self._consume_channel.get_underlay_channel()
        ok = await channel.basic_consume(self._queue_name, self._on_delivery)
        channel.on_consumer_cancel_callbacks.add(self._on_consumer_cancelled)
        self._consuming_on, self._consumer_tag = channel, ok.consumer_tag

    def _on_reopened(self, _sender: object) -> None:
        # aio-pika reopened the channel (and re-declared the topology): consume on it.
        self._resume(delay=0)

    def _on_consumer_cancelled(self, frame: Any) -> None:
        if self._stopping or frame.consumer_tag != self._consumer_tag:
            return
        log.error("the broker cancelled the consumer of %r (queue deleted?)", self._queue_name)
        self.ready.clear()
        self.hooks.consuming_changed(self._queue_name, False)
        self._resume(delay=0, declare_again=True)  # at once: retries expire into this queue

    def _resume(self, *, delay: float, declare_again: bool = False) -> None:
        if self._stopping or (self._resuming is not None and not self._resuming.done()):
            return
        self._resuming = asyncio.create_task(self._consume_again(delay, declare_again))

    async def _consume_again(self, delay: float, declare_again: bool) -> None:
        """Consume again, every RECONNECT_INTERVAL until it works or the worker stops."""
        while not self._stopping:
            await asyncio.sleep(delay)
            try:
                if declare_again:
                    await self.keeper.redeclare(CONSUMER_CANCELLED)
                await self._consume()
            except Exception as exc:
                log.warning("could not consume %r again (%s); retrying", self._queue_name, exc)
                delay = RECONNECT_INTERVAL
                continue
            if not self._stopping:
                self.ready.set()
                self.hooks.consuming_changed(self._queue_name, True)
                log.info("consuming %r again", self._queue_name)
            return

    async def _cancel_consumer(self) -> None:
        if self._resuming is not None:
            self._resuming.cancel()
        channel, tag = self._consuming_on, self._consumer_tag
        if channel is None or tag is None or channel.is_closed:
            return
        self._consumer_tag = None
        try:
            async with asyncio.timeout(0.5 if self._blocked.blocked else CLOSE_TIMEOUT):
                await channel.basic_cancel(tag)
        except Exception as exc:  # the connection may already be gone; closing requeues all
            log.warning("could not cancel the consumer cleanly: %s", exc)

    async def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close_callbacks.discard(self._on_connection_lost)
            try:
                async with asyncio.timeout(0.5 if self._blocked.blocked else CLOSE_TIMEOUT):
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
        if self._stopping:
            return
        self.ready.clear()
        self.hooks.connection_changed(False)
        log.warning("connection to RabbitMQ lost (%s); reconnecting", exc or "closed")

    def _on_reconnected(self, _sender: object) -> None:
        # Ready again once the consumer is back (_consume_again, from _on_reopened).
        self.hooks.connection_changed(True)
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

    async def _on_delivery(self, message: aiormq.abc.DeliveredMessage) -> None:
        delivery = Incoming(message)
        acker = self._acker_for(delivery)
        if self._stopping:
            # Arrived between basic.cancel and its confirmation: give it back.
            await self._nack(delivery, resolve_type(delivery, self._queue_name), acker)
            return
        # The handler runs in a task of our own, not in aiormq's delivery task: aiormq
        # cancels its tasks when the channel closes, and a lost connection must not
        # interrupt a handler half-way through sending an email. Its ack then fails
        # and the broker redelivers the message, which is logged as such.
        task = asyncio.create_task(self._handle(delivery, acker))
        self._tasks.add(task)
        self._handling.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, delivery: Incoming, acker: Acker) -> None:
        task = asyncio.current_task()
        assert task is not None
        type_name = resolve_type(delivery, self._queue_name)
        self.hooks.received(self._queue_name, type_name if type_name in self._handlers else UNKNOWN)
        span = NO_DELIVERY
        if self.tracing.enabled:
            span = trace_delivery(self.tracing, delivery, self._queue_name, type_name)
        if self.admission:
            try:
                await self.admission.enter(type_name)
            except asyncio.CancelledError:  # shutdown while waiting for its turn
                self._handling.discard(task)
                await self._nack(delivery, type_name, acker)
                span.end("requeued")
                raise
            except Exception as exc:  # a shared limiter is down: a failed attempt
                self._handling.discard(task)
                outcome = limit_failure(self._handlers, delivery, type_name, exc)
                await self._settle_safely(delivery, outcome, type_name, acker, span)
                return
        self.hooks.handler_started(self._queue_name)
        try:
            if delivery.redelivered:
                log.info(
                    "redelivered message %s (it may have been handled before: at-least-once)",
                    delivery.message_id or "(no message_id)",
                )
            if self.breakers is not None and not await self.breakers.admit(type_name):
                await self._nack(delivery, type_name, acker)  # circuit open: back, no attempt used
                span.end("requeued")
                return
            with span.activate():
                outcome = await process(
                    self._handlers,
                    self._queue_name,
                    delivery,
                    self._executor,
                    type_name,
                    send=self._send_follow_ups,
                    outbox=self.app.outbox,
                )
            if self.breakers is not None and not outcome.busy:
                self.breakers.record(type_name, outcome.decision)
        except asyncio.CancelledError:  # shutdown after the grace period
            await self._nack(delivery, type_name, acker)
            span.end("requeued")
            raise
        except HandlerNotStarted as exc:  # no thread, and no retry tier to wait in
            log.warning("message %s not run: %s", delivery.message_id or "-", exc)
            await asyncio.sleep(REQUEUE_BACKOFF)
            await self._nack(delivery, type_name, acker)
            return
        finally:
            self._handling.discard(task)
            self.hooks.handler_finished(self._queue_name)
            if self.admission:
                self.admission.leave(type_name)
        await self._settle_safely(delivery, outcome, type_name, acker, span)

    async def _settle_safely(
        self, delivery: Incoming, outcome: Outcome, type_name: str, acker: Acker, span: DeliverySpan
    ) -> None:
        try:
            await self._settle(delivery, outcome, type_name, acker, span)
        except Exception:  # a bug must not leave a delivery unsettled until the channel dies
            log.exception("could not settle message %s; returning it", delivery.message_id or "-")
            await asyncio.sleep(REQUEUE_BACKOFF)
            await self._nack(delivery, type_name, acker)
            span.end("requeued")

    async def _settle(
        self, delivery: Incoming, outcome: Outcome, type_name: str, acker: Acker, span: DeliverySpan
    ) -> None:
        """Ack, or store a confirmed copy and then ack; ``type_name`` is the resolved type,
        written to the copy (a retried message comes back with the queue as routing key)."""
        decision = outcome.decision
        queue = self._queue_name
        if not isinstance(decision, Retry | DeadLetter):
            if outcome.duplicate:
                outcome_log.duplicate(delivery, outcome)
                self.hooks.duplicate(queue, outcome.type_name)
            span.end("success")
            done = functools.partial(
                self.hooks.succeeded, queue, outcome.type_name, outcome.duration
            )
            acker.ack(delivery.delivery_tag, outcome_log.handled(done, delivery, outcome))
            return
        target, headers, exchange = copy_of(delivery, outcome, self.topology, queue)
        if isinstance(decision, Retry):
            span.retried(decision.label, decision.next_attempt, decision.deferred, outcome.error)
        else:
            span.dead_lettered(decision.reason, outcome.error)
        span.copied(headers)
        try:
            await self._copies.store(
                target, delivery.body, properties.copy(delivery, type_name, headers),
                exchange=exchange,
            )  # fmt: skip
        except PublishError as exc:
            log.error(
                "could not store message %s in %s (%s); returning it to %r",
                delivery.message_id or "(no message_id)",
                target,
                exc,
                queue,
            )
            await asyncio.sleep(REQUEUE_BACKOFF)
            await self._nack(delivery, outcome.type_name, acker)
            span.end("requeued", outcome.error)
            return
        span.end("retried" if isinstance(decision, Retry) else "dead_lettered", outcome.error)
        # If the ack cannot be sent, the copy is stored and the original will be
        # redelivered: a duplicate, and no hook is called.
        acker.ack(
            delivery.delivery_tag,
            functools.partial(report_copied, self.hooks, queue, delivery, outcome, target),
        )

    async def _send_follow_ups(self, follow_ups: Sequence[FollowUp]) -> None:
        """Publish a succeeded handler's follow-ups, confirmed, before its ack."""
        assert (channel := self.keeper.copy_channel) is not None
        await send_follow_ups(channel, self.app.exchange, follow_ups, self.hooks, self.app.tracing)

    async def _nack(self, delivery: Incoming, type_name: str, acker: Acker) -> None:
        if not await acker.nack(delivery.delivery_tag):
            log.warning(
                "could not return message %s: the broker will redeliver it",
                delivery.message_id or "(no message_id)",
            )
        self.hooks.requeued(self._queue_name, type_name)
