"""The consumer of one queue: its channel, its consumer tag, why it is paused, and the
readiness that follows.

Several parts of the worker have a reason to stop new deliveries: the worker stops, a
circuit breaker opens (:mod:`rabbitq._worker.breaker_guard`), a copy is held because the
broker refused it (:mod:`rabbitq._worker.copies`). Each says so with
``consumer.pause(reason, why)`` and takes it back with ``consumer.resume(reason)``; the
consumer cancels its ``basic.consume`` while any such reason holds and consumes again
when none does, retrying every :data:`RETRY_INTERVAL` seconds while the broker will not
have it. ``/readyz``, the supervisor and the tests ask :meth:`Consumer.health`.

A reason may pause without making the worker unready, and the other way round:

- ``breaker_open`` pauses, and the worker stays ready: it is well, a handler's
  dependency is not (restarting the pod would not help);
- ``broker_blocked`` (a memory or disk alarm) makes it unready without a
  ``basic.cancel``: the broker reads nothing from a blocked connection, so a cancel
  would only wait; deliveries already coming are handled and their copies wait.

The consumer also consumes again by itself whenever aio-pika reopens its channel (a
reconnect, a channel error), and after the broker cancelled it (its queue was deleted:
the topology is declared again first).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import aiormq.abc
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection

from ..hooks import CONSUMER_CANCELLED, Hooks
from .delivery import OnDelivery, deliver_directly

log = logging.getLogger("rabbitq.worker")

# Why the consumer is paused (``pause``'s reasons). Issues that add one add it here.
STOPPING = "stopping"
BREAKER_OPEN = "breaker_open"
COPIES_HELD = "copies_held"
BROKER_BLOCKED = "broker_blocked"

KEEPS_CONSUMING = frozenset({BROKER_BLOCKED})
"""Reasons that make the worker unready but do not cancel the consumer."""
KEEPS_READY = frozenset({BREAKER_OPEN})
"""Reasons that cancel the consumer but leave the worker ready."""
_FIRST = (BROKER_BLOCKED, COPIES_HELD)  # the order in which /readyz names reasons

# Why a worker is not ready (the body of a 503 from /readyz), besides a reason's own line.
STARTING = "starting: not consuming yet"
NOT_CONNECTED = "not connected to RabbitMQ"
NOT_CONSUMING = "not consuming (stopped or draining)"

RETRY_INTERVAL = 2.0
"""Seconds between attempts to consume (or cancel) again after one failed."""
CLOSE_TIMEOUT = 5.0
"""A ``basic.cancel`` waits at most this long (0.5 s while the broker blocks us)."""


def wants_consumer(reasons: Mapping[str, str]) -> bool:
    """Should the queue be consumed, given the reasons to pause (pure)."""
    return all(reason in KEEPS_CONSUMING for reason in reasons)


def consuming(reasons: Mapping[str, str], *, started: bool, lost: bool) -> bool:
    """What ``rabbitq_consuming`` says (pure): started, not stopping, the consumer not
    lost (cancelled by the broker and not back yet), and not paused by a reason that
    makes the worker unready. A lost connection does not count: it comes back by itself.
    """
    if not started or lost:
        return False
    return all(r in KEEPS_READY or r in KEEPS_CONSUMING for r in reasons)


def readiness(
    reasons: Mapping[str, str], *, started: bool, connected: bool, lost: bool, live: bool
) -> str | None:
    """Why the worker is not ready (one short line), or None when it is (pure).

    ``live``: the broker has our consumer on the current channel (a reopened channel
    has none until the consumer consumes on it again).
    """
    if not started:
        return STARTING
    if not connected:
        return NOT_CONNECTED
    ranked = sorted(reasons, key=lambda r: _FIRST.index(r) if r in _FIRST else len(_FIRST))
    for reason in ranked:
        if reason != STOPPING and reason not in KEEPS_READY:
            return reasons[reason]
    if not consuming(reasons, started=started, lost=lost):
        return NOT_CONSUMING
    if wants_consumer(reasons) and not live:
        return NOT_CONSUMING
    return None


class Pausable(Protocol):
    """What the parts that pause the consumer need of it."""

    def pause(self, reason: str, why: str) -> None: ...
    def resume(self, reason: str) -> None: ...
    @property
    def stopping(self) -> bool: ...


class Consumer:
    """Consumes ``queue`` with ``on_delivery`` and owns why it does not.

    ``redeclare(reason)`` declares the app's topology again (after the broker cancelled
    the consumer). Every method runs on the event loop except :meth:`health`, which any
    thread may call (the endpoint server's).
    """

    def __init__(
        self,
        queue: str,
        on_delivery: OnDelivery,
        hooks: Hooks,
        *,
        redeclare: Callable[[str], Awaitable[None]],
    ) -> None:
        self.queue = queue
        self._on_delivery = on_delivery
        self._hooks = hooks
        self._redeclare = redeclare
        self.channel: AbstractRobustChannel | None = None
        """The robust channel the consumer consumes on (the topology is declared on it)."""
        # The aiormq channel we consume on, and our consumer's tag there.
        self._consuming_on: aiormq.abc.AbstractChannel | None = None
        self._tag: str | None = None
        self.arguments: dict[str, Any] = {}
        """``basic.consume``'s arguments (``x-consumer-timeout``: ``consumer_args``)."""
        # Replaced, never mutated, so that health() may read them from another thread.
        self._reasons: dict[str, str] = {}
        self._started = False
        self._connected = False
        self._reported = False  # what consuming_changed said last
        self._lost = False  # the broker cancelled us: declare the queue again, consume
        self._reconciling: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        """Set while :meth:`health` is None."""

    # -- what the rest of the worker says -----------------------------------------------

    def pause(self, reason: str, why: str) -> None:
        """Stop new deliveries for ``reason`` (``why``: one line for /readyz) until
        :meth:`resume`; pausing again for the same reason updates ``why``."""
        if self._reasons.get(reason) == why:
            return
        self._reasons = {**self._reasons, reason: why}
        self._changed()

    def resume(self, reason: str) -> None:
        """``reason`` no longer holds; the consumer consumes again if no other does
        (``stopping`` is for good: it is not resumed)."""
        if reason not in self._reasons or reason == STOPPING:
            return
        self._reasons = {r: why for r, why in self._reasons.items() if r != reason}
        self._changed()

    @property
    def reasons(self) -> Mapping[str, str]:
        """Why the consumer is paused now: reason -> one line."""
        return self._reasons

    @property
    def stopping(self) -> bool:
        """The worker is stopping: the consumer never consumes again."""
        return STOPPING in self._reasons

    @property
    def blocked(self) -> bool:
        """The broker blocks the connection (a resource alarm)."""
        return BROKER_BLOCKED in self._reasons

    def health(self) -> str | None:
        """Why the worker is not ready (one short line), or None. Safe from any thread."""
        return readiness(
            self._reasons,
            started=self._started,
            connected=self._connected,
            lost=self._lost,
            live=self._live(),
        )

    def connection_changed(self, up: bool) -> None:
        """The worker's connection was lost (False) or re-established (True)."""
        self._connected = up
        self._changed(reconcile=False)  # consumed again once aio-pika reopens the channel

    # -- the channel and the consumer ---------------------------------------------------

    async def open(
        self, connection: AbstractRobustConnection, prefetch: int
    ) -> AbstractRobustChannel:
        """Open the consume channel with ``prefetch`` (the broker's, admission included)."""
        self.channel = await connection.channel(publisher_confirms=False)
        await self.channel.set_qos(prefetch_count=prefetch)
        self._connected = True
        return self.channel

    async def start(self) -> None:
        """The first ``basic.consume`` (its error is raised); then keep consuming."""
        assert self.channel is not None
        if wants_consumer(self._reasons):
            await self._consume()
        self.channel.reopen_callbacks.add(self._on_reopened)
        self._started = True
        self._changed()

    async def stop(self) -> None:
        """Stop consuming for good: cancel the consumer and wait for the broker's answer
        (at most :data:`CLOSE_TIMEOUT`). Deliveries sent meanwhile still arrive."""
        self._reasons = {**self._reasons, STOPPING: NOT_CONSUMING}
        if self._reconciling is not None and not self._reconciling.done():
            self._reconciling.cancel()  # a consume half-way is cancelled below
            await asyncio.gather(self._reconciling, return_exceptions=True)
        await self._cancel()
        self._changed(reconcile=False)

    def _live(self) -> bool:
        channel = self._consuming_on
        return self._tag is not None and channel is not None and not channel.is_closed

    async def _consume(self) -> None:
        assert self.channel is not None
        channel = await self.channel.get_underlay_channel()
        # Without aiormq's task per delivery, from the first delivery on: the tag is ours,
        # so the route exists before the broker can deliver. (Routed after consume-ok, the
        # first deliveries ran in aiormq's tasks and were overtaken by the next ones: an
        # ordered handler's key ran out of order.) If aiormq changed, _delivered serves.
        tag = f"rabbitq-{uuid.uuid4().hex}"
        deliver_directly(channel, tag, self._on_delivery)
        ok = await channel.basic_consume(
            self.queue, self._delivered, arguments=self.arguments, consumer_tag=tag
        )
        channel.on_consumer_cancel_callbacks.add(self._on_cancelled)
        self._consuming_on, self._tag = channel, ok.consumer_tag

    async def _delivered(self, message: aiormq.abc.DeliveredMessage) -> None:
        self._on_delivery(message)  # in aiormq's task; it starts the worker's own

    async def _cancel(self) -> None:
        channel, tag = self._consuming_on, self._tag
        if channel is None or tag is None or channel.is_closed:
            self._tag = None  # a closed channel's consumer is gone already
            return
        try:
            async with asyncio.timeout(0.5 if self.blocked else CLOSE_TIMEOUT):
                await channel.basic_cancel(tag)
        except Exception as exc:  # the connection may already be gone; closing requeues all
            log.warning("could not cancel the consumer cleanly: %s", exc)
        if self._tag == tag:  # (not when interrupted: stop() cancels it again)
            self._tag = None

    def _on_reopened(self, _sender: object) -> None:
        # aio-pika reopened the channel (and declared the topology again): consume on it.
        self._tag = None
        self._changed()

    def _on_cancelled(self, frame: Any) -> None:
        if self.stopping or frame.consumer_tag != self._tag:
            return
        log.error("the broker cancelled the consumer of %r (queue deleted?)", self.queue)
        self._tag = None
        self._lost = True  # consume again at once: retries expire into this queue
        self._changed()

    # -- keeping the broker's consumer as wanted ----------------------------------------

    def _changed(self, *, reconcile: bool = True) -> None:
        """Tell the hooks and the ready event; consume or cancel as now wanted."""
        if self._started:
            now = consuming(self._reasons, started=True, lost=self._lost)
            if now != self._reported:
                self._reported = now
                self._hooks.consuming_changed(self.queue, now)
        if self.health() is None:
            self.ready.set()
        else:
            self.ready.clear()
        if reconcile and self._started and not self.stopping:
            if self._reconciling is None or self._reconciling.done():
                self._reconciling = asyncio.get_running_loop().create_task(self._reconcile())

    async def _reconcile(self) -> None:
        """Consume while no reason pauses the queue, cancel while one does; a failed
        attempt is made again every :data:`RETRY_INTERVAL` seconds."""
        while not self.stopping:
            want = wants_consumer(self._reasons)
            if want == self._live():
                return
            try:
                if want:
                    if self._lost:
                        await self._redeclare(CONSUMER_CANCELLED)
                    await self._consume()
                    self._lost = False
                    if not self.stopping:
                        log.info("consuming %r again", self.queue)
                else:
                    await self._cancel()
            except Exception as exc:  # e.g. the connection is down: try again
                log.warning(
                    "could not %s %r (%s); retrying",
                    "consume" if want else "stop consuming",
                    self.queue,
                    exc,
                )
                await asyncio.sleep(RETRY_INTERVAL)
                continue
            finally:
                self._changed(reconcile=False)
