"""The worker: consume one queue with prefetch-bounded concurrency and settle every
delivery safely with the broker.

The order of operations is the guarantee: a retry or DLQ copy is published and
*confirmed* before the original is acked; if the copy cannot be confirmed the original
is returned to the queue (nack, requeue). A lost connection leaves every unacked
delivery to the broker, which redelivers it. Nothing is acked that is not safe.
Acks are coalesced into multiple-acks by :mod:`rabbitq.acks`, which is handed a
delivery only once its outcome is safe.

The worker consumes on aiormq's channel under aio-pika's robust one (see
:mod:`rabbitq.delivery` for why), so it consumes again itself whenever aio-pika
reopens that channel (a reconnect, a channel error) or the broker cancels it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiormq.abc
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection
from pamqp.commands import Basic

from . import headers as h
from . import limits
from .acks import Acker
from .app import App
from .breaker import OPEN, BreakerGuard
from .connection import RECONNECT_INTERVAL, connect
from .delivery import Incoming
from .dispatch import UNKNOWN, Outcome, message_id_of, process, resolve_type
from .errors import ConfigurationError, PublishError
from .hooks import Hooks, combine
from .publisher import PERSISTENT, send_confirmed
from .retry import DeadLetter, Retry
from .settings import TLS, Settings, redact_url
from .topology import Topology, declare

log = logging.getLogger("rabbitq.worker")

DEFAULT_GRACE_PERIOD = 30.0
# The name prefix of the threads that run sync handlers.
HANDLER_THREAD_PREFIX = "rabbitq-handler"
# After a copy could not be confirmed, wait this long before returning the message,
# so that a persistent fault (a deleted retry queue) does not become a hot loop.
REQUEUE_BACKOFF = 1.0


def _copy(delivery: Incoming, type_name: str, headers: dict[str, Any]) -> Basic.Properties:
    """The properties of a persistent copy: the standard ones unchanged.

    Not carried: ``expiration`` (a copy must not silently expire in the DLQ) and
    ``user_id`` (the broker checks it against the publishing user).
    """
    return Basic.Properties(
        headers=headers,
        content_type=delivery.content_type,
        content_encoding=delivery.content_encoding,
        delivery_mode=PERSISTENT,
        priority=delivery.priority,
        correlation_id=delivery.correlation_id,
        reply_to=delivery.reply_to,
        # aiormq would give a copy without one a new random id on every attempt
        message_id=message_id_of(delivery, type_name),
        timestamp=delivery.timestamp,
        message_type=type_name,
        app_id=delivery.app_id,
    )


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
        # the broker's delivery-ack timeout, if known (see rabbitq.limits)
        self.consumer_timeout = (
            Settings.from_env().consumer_timeout if consumer_timeout is None else consumer_timeout
        )
        self.prefetch = prefetch or app.prefetch
        self.grace_period = grace_period
        self.hooks = combine(hooks)
        self.topology: Topology = app.topology()
        self._handlers = app.handlers
        self._queue_name = app.queue
        self._executor = ThreadPoolExecutor(
            max_workers=sync_workers or self.prefetch, thread_name_prefix=HANDLER_THREAD_PREFIX
        )
        self._connection: AbstractRobustConnection | None = None
        self._consume_channel: AbstractRobustChannel | None = None
        self._copy_channel: AbstractRobustChannel | None = None
        # The aiormq channel we consume on, and our consumer's tag there.
        self._consuming_on: aiormq.abc.AbstractChannel | None = None
        self._consumer_tag: str | None = None
        self._resuming: asyncio.Task[None] | None = None
        self._coalesce_acks = coalesce_acks
        self._acker: Acker | None = None  # the acks of the current consume channel
        self._tasks: set[asyncio.Task[None]] = set()  # every delivery not yet settled
        self._handling: set[asyncio.Task[None]] = set()  # those still in their handler
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
        self._connection = await connect(
            self.url, name=f"rabbitq worker {self._queue_name}", tls=self.tls
        )
        self._connection.close_callbacks.add(self._on_connection_lost)
        self._connection.reconnect_callbacks.add(self._on_reconnected)
        self.hooks.connection_changed(True)
        limits.check_timeouts(self._handlers, self.consumer_timeout)
        try:
            self._consume_channel = await self._connection.channel(publisher_confirms=False)
            self._consume_channel.close_callbacks.add(limits.on_channel_closed)
            await self._consume_channel.set_qos(prefetch_count=self.prefetch)
            self.hooks.prefetch_changed(self._queue_name, self.prefetch)
            self._copy_channel = await self._connection.channel(
                publisher_confirms=True, on_return_raises=True
            )
            # Declared on the robust channel, so aio-pika re-declares it on reconnect.
            await declare(self._consume_channel, self.topology)
            await self._consume()
            self._consume_channel.reopen_callbacks.add(self._on_reopened)
        except BaseException:
            await self._close_connection()
            raise
        self.hooks.consuming_changed(self._queue_name, True)
        self.ready.set()
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
            await self.start()
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
            # Settling (a confirm, an ack) is short; it is never cancelled half-way.
            await asyncio.wait(list(self._tasks), timeout=10)
        if self._acker is not None:
            await self._acker.flush()  # the acks still waiting to be coalesced
        connected = self._connection is not None
        await self._close_connection()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if connected:  # a worker that never connected just reports the error
            log.info("worker for %r stopped", self._queue_name)

    async def _consume(self) -> None:
        """basic.consume on the robust channel's current aiormq channel, unless the
        worker is stopping or a circuit breaker holds the queue paused."""
        if self._stopping or (self.breakers is not None and self.breakers.state == OPEN):
            return
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
        self._resume(delay=RECONNECT_INTERVAL, declare_again=True)

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
                    assert self._consume_channel is not None
                    await declare(self._consume_channel, self.topology)
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
            await channel.basic_cancel(tag)
        except Exception as exc:  # the connection may already be gone; closing requeues all
            log.warning("could not cancel the consumer cleanly: %s", exc)

    async def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close_callbacks.discard(self._on_connection_lost)
            try:
                await self._connection.close()
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
        self.hooks.handler_started(self._queue_name)
        try:
            if delivery.redelivered:
                log.info(
                    "redelivered message %s (it may have been handled before: at-least-once)",
                    delivery.message_id or "(no message_id)",
                )
            if self.breakers is not None and not await self.breakers.admit(type_name):
                await self._nack(delivery, type_name, acker)  # circuit open: back, no attempt used
                return
            outcome = await process(
                self._handlers, self._queue_name, delivery, self._executor, type_name
            )
            if self.breakers is not None:
                self.breakers.record(type_name, outcome.decision)
        except asyncio.CancelledError:  # shutdown after the grace period
            await self._nack(delivery, type_name, acker)
            raise
        finally:
            self._handling.discard(task)
            self.hooks.handler_finished(self._queue_name)
        try:
            await self._settle(delivery, outcome, type_name, acker)
        except Exception:  # a bug must not leave a delivery unsettled until the channel dies
            log.exception("could not settle message %s; returning it", delivery.message_id or "-")
            await asyncio.sleep(REQUEUE_BACKOFF)
            await self._nack(delivery, type_name, acker)

    async def _settle(
        self, delivery: Incoming, outcome: Outcome, type_name: str, acker: Acker
    ) -> None:
        """Ack, or store a confirmed copy and then ack; ``type_name`` is the resolved type,
        written to the copy (a retried message comes back with the queue as routing key)."""
        decision = outcome.decision
        queue = self._queue_name
        if isinstance(decision, Retry):
            target = self.topology.retry_queue(decision.delay_ms).name
            headers = h.retry_headers(
                delivery.headers,
                next_attempt=decision.next_attempt,
                error=outcome.error or "",
                exchange=delivery.exchange or "",
                routing_key=delivery.routing_key or "",
            )
        elif isinstance(decision, DeadLetter):
            target = self.topology.dlq.name
            headers = h.dead_letter_headers(
                delivery.headers,
                reason=decision.reason,
                error=outcome.error or "",
                traceback=outcome.traceback,
                queue=queue,
                attempt=outcome.attempt,
                exchange=delivery.exchange or "",
                routing_key=delivery.routing_key or "",
            )
        else:
            acker.ack(
                delivery.delivery_tag,
                functools.partial(self.hooks.succeeded, queue, outcome.type_name, outcome.duration),
            )
            return

        assert self._copy_channel is not None
        try:
            await send_confirmed(
                self._copy_channel, "", target, delivery.body, _copy(delivery, type_name, headers)
            )
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
            return
        # If the ack cannot be sent, the copy is stored and the original will be
        # redelivered: a duplicate, and no hook is called.
        acker.ack(delivery.delivery_tag, functools.partial(self._copied, delivery, outcome, target))

    def _copied(self, delivery: Incoming, outcome: Outcome, target: str) -> None:
        """Log and report a delivery whose copy was confirmed and whose ack was sent."""
        queue = self._queue_name
        decision = outcome.decision
        if isinstance(decision, Retry):
            log.info(
                "message %s (%s) failed attempt %d, retrying in %s: %s",
                delivery.message_id or "-",
                outcome.type_name,
                outcome.attempt,
                decision.label,
                outcome.error,
            )
            self.hooks.retried(queue, outcome.type_name, decision.label, outcome.duration)
        else:
            assert isinstance(decision, DeadLetter)
            log.warning(
                "message %s (%s) dead-lettered to %s (%s): %s",
                delivery.message_id or "-",
                outcome.type_name,
                target,
                decision.reason,
                outcome.error,
            )
            self.hooks.dead_lettered(queue, outcome.type_name, decision.reason, outcome.duration)

    async def _nack(self, delivery: Incoming, type_name: str, acker: Acker) -> None:
        if not await acker.nack(delivery.delivery_tag):
            log.warning(
                "could not return message %s: the broker will redeliver it",
                delivery.message_id or "(no message_id)",
            )
        self.hooks.requeued(self._queue_name, type_name)
