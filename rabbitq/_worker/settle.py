"""Settling one delivery with the broker once its outcome is known.

The order is the guarantee: an ack goes to the acker (coalesced); a retry or DLQ copy
is stored *and confirmed* (:class:`~rabbitq._worker.copies.CopyStore`) before the
original is acked; a copy that cannot be stored returns the original to its queue
(nack, requeue). If the ack itself cannot be sent, the copy is stored and the original
will be redelivered: a duplicate, never a loss.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from .._amqp import copy
from .._amqp.topology import Topology
from ..errors import PublishError
from ..hooks import Hooks
from ..outcome import DeadLetter, Outcome, Retry
from ..tracing.base import DeliverySpan
from . import outcome_log
from .acks import Acker
from .copies import CopyStore, report_copied
from .delivery import Incoming

log = logging.getLogger("rabbitq.worker")

REQUEUE_BACKOFF = 1.0
"""After a copy failed (connection lost), wait this long before returning the message."""


class Settler:
    """Acks, stores copies and returns deliveries of ``queue``."""

    def __init__(self, queue: str, topology: Topology, copies: CopyStore, hooks: Hooks) -> None:
        self.queue = queue
        self._topology = topology
        self._copies = copies
        self._hooks = hooks

    async def settle(
        self, delivery: Incoming, outcome: Outcome, type_name: str, acker: Acker, span: DeliverySpan
    ) -> None:
        """Settle ``delivery`` as ``outcome`` says; a bug here returns it to the queue."""
        try:
            await self._settle(delivery, outcome, type_name, acker, span)
        except Exception:  # a bug must not leave a delivery unsettled until the channel dies
            log.exception("could not settle message %s; returning it", delivery.message_id or "-")
            await asyncio.sleep(REQUEUE_BACKOFF)
            await self.nack(delivery, type_name, acker, failed=True)  # counted, on 4.3 too
            span.end("requeued")

    async def _settle(
        self, delivery: Incoming, outcome: Outcome, type_name: str, acker: Acker, span: DeliverySpan
    ) -> None:
        """Ack, or store a confirmed copy and then ack; ``type_name`` is the resolved type,
        written to the copy (a retried message comes back with the queue as routing key)."""
        decision = outcome.decision
        queue = self.queue
        if not isinstance(decision, Retry | DeadLetter):
            if outcome.duplicate:
                outcome_log.duplicate(delivery, outcome)
                self._hooks.duplicate(queue, outcome.type_name)
                span.duplicate()
            if outcome.skipped is not None:  # acked unrun (cancelled, superseded): no success
                outcome_log.skipped(delivery, outcome, outcome.skipped)
                span.skipped(outcome.skipped)
                span.end("success")
                acker.ack(delivery.delivery_tag, outcome_log.nothing)
                return
            span.end("success")
            done = functools.partial(
                self._hooks.succeeded, queue, outcome.type_name, outcome.duration
            )
            acker.ack(delivery.delivery_tag, outcome_log.handled(done, delivery, outcome))
            return
        if isinstance(decision, Retry):
            c = copy.retry(
                delivery,
                decision,
                type_name=type_name,
                error=outcome.error or "",
                topology=self._topology,
                queue=queue,
            )
            span.retried(decision.label, decision.next_attempt, decision.deferred, outcome.error)
        else:
            c = copy.dead_letter(
                delivery,
                decision,
                type_name=type_name,
                error=outcome.error or "",
                traceback=outcome.traceback,
                attempt=outcome.attempt,
                queue=queue,
                topology=self._topology,
            )
            span.dead_lettered(decision.reason, outcome.error)
        target = c.target
        span.copied(c.properties.headers or {})
        try:
            await self._copies.store(target, c.body, c.properties, exchange=c.exchange)
        except PublishError as exc:
            log.error(
                "could not store message %s in %s (%s); returning it to %r",
                delivery.message_id or "(no message_id)",
                target,
                exc,
                queue,
            )
            await asyncio.sleep(REQUEUE_BACKOFF)
            await self.nack(delivery, outcome.type_name, acker)
            span.end("requeued", outcome.error)
            return
        span.end("retried" if isinstance(decision, Retry) else "dead_lettered", outcome.error)
        # If the ack cannot be sent, the copy is stored and the original will be
        # redelivered: a duplicate, and no hook is called.
        acker.ack(
            delivery.delivery_tag,
            functools.partial(report_copied, self._hooks, queue, delivery, outcome, target),
        )

    async def nack(
        self, delivery: Incoming, type_name: str, acker: Acker, *, failed: bool = False
    ) -> None:
        """Return ``delivery`` to its queue: a nack with requeue where the worker chose not
        to run it or could not store its copy; with ``failed`` (settling it failed) a
        ``basic.reject``, which RabbitMQ 4.3 counts towards a quorum queue's delivery
        limit where it does not count a nack."""
        if not await (acker.reject if failed else acker.nack)(delivery.delivery_tag):
            log.warning(
                "could not return message %s: the broker will redeliver it",
                delivery.message_id or "(no message_id)",
            )
        self._hooks.requeued(self.queue, type_name)
