"""Ack coalescing: one ``basic.ack(multiple=True)`` for the contiguous run of finished
deliveries of a channel, instead of one frame (and one socket write) per delivery.

The worker decides outcomes; this module only sends acks and nacks, under these rules:

- A delivery is handed to :meth:`Acker.ack` only once its outcome is safe: the handler
  returned, or its retry/DLQ copy was confirmed by the broker.
- A multiple-ack through tag ``T`` acknowledges every unacked delivery up to ``T`` on
  the channel, so ``T`` is the last tag of a run in which every tag is done or already
  settled on its own. A tag still being handled, or not yet seen, ends the run.
- A nack (requeue) is sent on its own at once, never folded into a multiple-ack; its
  tag counts as settled only after the nack frame is queued, so no later multiple-ack
  can overtake it. Only one ack is in flight at a time, so acks keep their order.
- Done deliveries above a gap (a slow handler on a lower tag) are acked one by one
  once they have waited ``max_wait`` seconds, so a slow handler never holds the other
  prefetch slots for longer than that.
- Delivery tags belong to a channel and restart on a new one (after a reconnect): an
  :class:`Acker` serves one channel; the acks of a closed channel fail and the broker
  redelivers those messages.

:class:`AckLedger` is the bookkeeping, pure and synchronous; :class:`Acker` does the I/O.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import aiormq.abc

log = logging.getLogger("rabbitq.worker")

# Acks are sent when this many deliveries are done, or DELAY seconds after the first.
BATCH = 64
DELAY = 0.005
# How long a finished delivery may wait behind a slower lower tag before it is acked alone.
MAX_WAIT = 0.02
# Allowance for the event loop's clock resolution when a timer fires.
_EPSILON = 0.001


@dataclass
class Plan:
    """The acks to send now: ``multiple`` (covering the tags in ``run``) and ``singles``."""

    multiple: int | None = None
    run: list[int] = field(default_factory=list)
    singles: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.multiple is not None or bool(self.singles)


class AckLedger:
    """Which delivery tags of one channel are done, settled or still open.

    ``done(tag, now)`` records a delivery whose ack is wanted; ``settled(tag)`` one that
    was settled alone (nacked); :meth:`plan` says what to send and records it as sent.
    Tags start at 1 and every delivery of the channel gets the next one.
    """

    def __init__(self) -> None:
        self._base = 0  # every tag up to here is settled
        self._done: dict[int, float] = {}  # tag -> when it was done, ack not yet planned
        self._settled: set[int] = set()  # above the base: nacked, or acked alone

    @property
    def pending(self) -> int:
        """Done deliveries whose ack has not been planned yet."""
        return len(self._done)

    @property
    def base(self) -> int:
        """Every tag up to and including this one is acked or settled."""
        return self._base

    def _check_open(self, tag: int) -> None:
        if tag < 1 or tag <= self._base or tag in self._done or tag in self._settled:
            raise ValueError(f"delivery tag {tag} is already settled")

    def done(self, tag: int, now: float) -> None:
        """The delivery ``tag`` is finished and safe to ack."""
        self._check_open(tag)
        self._done[tag] = now

    def settled(self, tag: int) -> None:
        """The delivery ``tag`` was settled on its own (its nack is queued)."""
        self._check_open(tag)
        self._settled.add(tag)

    def plan(
        self, now: float, max_wait: float, *, everything: bool = False, multiple: bool = True
    ) -> Plan:
        """The acks to send now, recorded as sent.

        A multiple-ack through the last done tag of the contiguous run above the base;
        single acks for done tags above a gap that have waited ``max_wait`` (all of them
        with ``everything``, as on shutdown). With ``multiple=False``, single acks only.
        """
        plan = Plan()
        tag = self._base + 1
        while True:
            if tag in self._done:
                del self._done[tag]
                plan.run.append(tag)
            elif tag in self._settled:
                self._settled.discard(tag)
            else:
                break
            tag += 1
        self._base = tag - 1
        if plan.run:
            plan.multiple = plan.run[-1]
        if self._done:
            cutoff = now - max_wait + _EPSILON
            plan.singles = sorted(t for t, at in self._done.items() if everything or at <= cutoff)
            for t in plan.singles:
                del self._done[t]
                self._settled.add(t)
        if not multiple and plan.run:
            plan.singles = plan.run + plan.singles
            plan.run, plan.multiple = [], None
        return plan


After = Callable[[], None]


class Acker:
    """Sends the acks of one channel's deliveries, coalesced (see the module docstring).

    ``ack(tag, after)`` returns at once; ``after()`` runs once the ack is written. Acks
    go out when ``batch`` deliveries are done or ``delay`` seconds after the first (keep
    ``batch`` well under the prefetch count: done deliveries hold their prefetch slot
    until acked). With ``coalesce=False`` every delivery is acked alone, at once.
    """

    def __init__(
        self,
        channel: aiormq.abc.AbstractChannel,
        *,
        coalesce: bool = True,
        batch: int = BATCH,
        delay: float | None = None,
        max_wait: float | None = None,
    ) -> None:
        self.channel = channel
        self.coalesce = coalesce
        self.batch = batch if coalesce else 1
        self.delay = DELAY if delay is None else delay
        self.max_wait = max(MAX_WAIT if max_wait is None else max_wait, self.delay)
        self._ledger = AckLedger()
        self._after: dict[int, After | None] = {}
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._sender: asyncio.Task[None] | None = None

    def ack(self, tag: int, after: After | None = None) -> None:
        """Ack ``tag`` soon; call ``after`` once the ack is written (not if it fails)."""
        self._ledger.done(tag, self._loop.time())
        self._after[tag] = after
        self._schedule()

    async def nack(self, tag: int) -> bool:
        """Return ``tag`` to the queue (nack, requeue) now; False if it could not be sent."""
        try:
            await self.channel.basic_nack(tag, multiple=False, requeue=True)
            ok = True
        except Exception:
            ok = False
        self._ledger.settled(tag)  # the nack frame is queued: later acks come after it
        if self._ledger.pending:
            self._schedule()
        return ok

    async def reject(self, tag: int) -> bool:
        """Return ``tag`` to the queue with ``basic.reject`` (requeue) now: unlike a nack,
        it raises a quorum queue's delivery count on RabbitMQ 4.3 too. False if it could
        not be sent."""
        try:
            await self.channel.basic_reject(tag, requeue=True)
            ok = True
        except Exception:
            ok = False
        self._ledger.settled(tag)  # the reject frame is queued: later acks come after it
        if self._ledger.pending:
            self._schedule()
        return ok

    async def flush(self) -> None:
        """Send every ack recorded so far (before closing the channel)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._sender is not None and not self._sender.done():
            await asyncio.wait([self._sender])
        if self._ledger.pending:
            self._sender = self._loop.create_task(self._send_all(everything=True))
            await self._sender

    def _schedule(self) -> None:
        if self._ledger.pending >= self.batch:
            # The sender's first step comes after the other handlers that finish in
            # this turn of the loop, so their acks go in the same frame.
            self._start()
        elif self._timer is None:
            self._timer = self._loop.call_later(self.delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._start()

    def _start(self) -> None:
        # A running sender plans again after each write, so it picks up what is new.
        if self._sender is None or self._sender.done():
            self._sender = self._loop.create_task(self._send_all())

    async def _send_all(self, *, everything: bool = False) -> None:
        everything = everything or not self.coalesce
        while plan := self._ledger.plan(
            self._loop.time(), self.max_wait, everything=everything, multiple=self.coalesce
        ):
            if plan.multiple is not None:
                await self._send(plan.multiple, True, plan.run)
            for tag in plan.singles:
                await self._send(tag, False, [tag])
            if not everything and self._ledger.pending < self.batch:
                break  # let a batch build up again rather than ack the few done meanwhile
        if self._ledger.pending and self._timer is None:
            # Done deliveries wait, under the batch size or above a gap: look again soon.
            self._timer = self._loop.call_later(self.delay, self._on_timer)

    async def _send(self, tag: int, multiple: bool, tags: list[int]) -> None:
        try:
            await self.channel.basic_ack(tag, multiple=multiple)
        except Exception as exc:
            for t in tags:
                self._after.pop(t, None)
            log.warning(
                "could not ack %d message(s) (%s): the broker will redeliver them",
                len(tags),
                type(exc).__name__,
            )
            return
        for t in tags:
            after = self._after.pop(t, None)
            if after is not None:
                try:
                    after()
                except Exception:  # a hook that raises must not stop the acks
                    log.exception("error after acking delivery %d", t)
