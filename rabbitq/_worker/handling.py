"""One delivery's task, from its arrival to its settling: the sets the drain reads
(every delivery not yet settled, and those still in their handler), the in-flight count
(a delivery counts from its handler slot until it is settled), the held watch
(:mod:`rabbitq._worker.held`), and the last resort: a stage list that raises, or answers
something other than an outcome, settles its delivery as a failed attempt rather than
holding it until the channel dies."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from ..errors import HandlerNotStarted
from ..hooks import UNKNOWN, Hooks
from ..job import Job, Next
from ..outcome import REQUEUE, Outcome
from ..tracing.base import NO_DELIVERY
from .acks import Acker
from .delivery import Incoming
from .held import Held
from .settle import REQUEUE_BACKOFF, Settler
from .spans import trace_delivery
from .stopping import Unsettled

log = logging.getLogger("rabbitq.worker")


class Deliveries:
    """The deliveries of one worker's queue, each in a task of its own."""

    def __init__(self, queue: str, settler: Settler, hooks: Hooks, tracing: Any) -> None:
        self.queue = queue
        self.settler = settler
        self.hooks = hooks
        self.tracing = tracing
        self.pipeline: Any = None  # the worker's stage list (it includes :meth:`running`)
        self.tasks = Unsettled(hooks, queue)  # every delivery not yet settled
        self.handling: set[asyncio.Task[None]] = set()  # those still in their handler
        self._counted: set[asyncio.Task[None]] = set()  # in rabbitq_messages_in_flight
        self.held = Held()  # deliveries held past every bound make the worker unready

    def start(self, job: Job, acker: Acker) -> asyncio.Task[None]:
        """The task that runs ``job`` through the stage list and settles it."""
        task = self.track(asyncio.create_task(self._handle(job, acker)))
        task.add_done_callback(functools.partial(self._settled, job))
        self.handling.add(task)
        return task

    def track(self, task: asyncio.Task[None]) -> asyncio.Task[None]:
        """Count ``task`` among the deliveries not yet settled until it ends."""
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def _settled(self, job: Job, task: asyncio.Task[None]) -> None:
        """``job``'s delivery is settled or returned: no longer held, nor in flight."""
        self.held.settled(job)
        if task in self._counted:
            self._counted.discard(task)
            self.hooks.handler_finished(self.queue)

    async def _handle(self, job: Job, acker: Acker) -> None:
        delivery, type_name, settler = job.delivery, job.type_name, self.settler
        assert isinstance(delivery, Incoming)
        self.hooks.received(self.queue, type_name if job.handler else UNKNOWN)
        span = NO_DELIVERY
        if self.tracing.enabled:
            span = trace_delivery(self.tracing, delivery, self.queue, type_name, job.attempt)
        try:
            with span.activate():
                outcome = await self.pipeline.run(job)
            if not isinstance(outcome, Outcome):
                raise TypeError(f"the stage list returned {outcome!r:.60}, not an outcome")
        except asyncio.CancelledError:  # shutdown: while waiting, or after the grace period
            await settler.nack(delivery, type_name, acker)
            span.end("requeued")
            raise
        except HandlerNotStarted as exc:  # no thread, and no retry tier to wait in
            log.warning("message %s not run: %s", delivery.message_id or "-", exc)
            await asyncio.sleep(REQUEUE_BACKOFF)
            await settler.nack(delivery, type_name, acker)
            return
        except Exception as exc:  # the last resort: a stage's bug must not hold it for ever
            log.exception("message %s: settled as a failed attempt", delivery.message_id or "-")
            outcome = job.fail(exc)
        finally:
            self.handling.discard(asyncio.current_task())
        if outcome.decision is REQUEUE:  # a breaker that is open, a middleware's "not now"
            await settler.nack(delivery, type_name, acker)
            span.end("requeued")
            return
        await settler.settle(delivery, outcome, type_name, acker, span)

    async def running(self, job: Job, call_next: Next) -> Outcome:
        """The worker's own stage, after admission: the delivery is in its handler (for
        the drain) until the rest of the list returns, and in flight (the metrics) until
        it is settled."""
        self.hooks.handler_started(self.queue)
        self._counted.add(asyncio.current_task())  # type: ignore[arg-type]
        if job.delivery.redelivered:
            log.info(
                "redelivered message %s (it may have been handled before: at-least-once)",
                job.delivery.message_id or "(no message_id)",
            )
        try:
            return await call_next(job)
        finally:  # out of its handler now (and again in _handle: it may never get here)
            self.handling.discard(asyncio.current_task())
