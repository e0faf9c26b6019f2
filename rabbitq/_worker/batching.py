"""Collecting deliveries into batches: :class:`Batcher` (docs/batches.md).

Each delivery of a batch handler's type keeps its own task in the worker, as any
delivery does; that task waits here for its outcome, then settles its delivery through
the same path as a single handler's (ack, or a confirmed retry or DLQ copy, then the
ack). So a batch adds no new way to settle, to return a message on shutdown or to lose
one: a delivery whose batch has not run is unacked, and the broker has it back if the
worker dies.

A batch is handed to its handler (:func:`~rabbitq._worker.batch_run.run_batch`) when it
holds ``max_size`` messages, or ``max_wait`` seconds after its first arrived, or at once
when the worker stops (:meth:`Batcher.stop`): a partial batch is run, not held. A
delivery cancelled while its batch waits (the grace period is over) leaves the batch and
goes back to its queue; one cancelled while its batch runs cancels the run, and every
delivery of it goes back (keys claimed for it are released).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import PermanentError
from ..handler import Handler
from ..hooks import Hooks
from ..job import Job, Next, failed
from ..outcome import Outcome
from .batch_run import BatchItem, run_batch

log = logging.getLogger("rabbitq.worker")

# Why a batch was handed to its handler (the ``batch_flushed`` hook's ``trigger``).
FULL, WAITED, STOPPING = "full", "max_wait", "stopping"


@dataclass(slots=True, eq=False)  # found by identity
class _Waiting:
    item: BatchItem
    future: asyncio.Future[Outcome] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Batcher:
    """The open batch of each batch handler of ``handlers``, and the batches running.

    ``prefetch`` (the worker's) is checked against every ``max_size``: a
    :class:`~rabbitq.ConfigurationError` at start where a batch could never fill.
    """

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        queue: str,
        hooks: Hooks | None = None,
        *,
        prefetch: int | None = None,
    ) -> None:
        for name, handler in handlers.items():
            if handler.batch is not None and prefetch is not None:
                handler.batch.check_prefetch(name, prefetch)
        self._handlers = handlers
        self._queue = queue
        self._hooks = hooks or Hooks()
        self._open: dict[str, list[_Waiting]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._running: dict[asyncio.Task[None], list[_Waiting]] = {}
        self._stopping = False

    async def __call__(self, job: Job, call_next: Next) -> Outcome:
        """The batch stage: a batch handler's message waits for its batch here."""
        return await _batched(job, call_next, self.submit)

    async def submit(self, type_name: str, message: Any, delivery: Any, attempt: int) -> Outcome:
        """Add a decoded message to its type's open batch; its outcome once the batch ran."""
        handler = self._handlers[type_name]
        assert handler.batch is not None
        waiting = _Waiting(BatchItem(message, delivery, attempt))
        batch = self._open.setdefault(type_name, [])
        batch.append(waiting)
        if self._stopping:
            self._flush(type_name, STOPPING)
        elif len(batch) >= handler.batch.max_size:
            self._flush(type_name, FULL)
        elif len(batch) == 1:
            loop = asyncio.get_running_loop()
            self._timers[type_name] = loop.call_later(
                handler.batch.max_wait, self._flush, type_name, WAITED
            )
        try:
            return await waiting.future
        except asyncio.CancelledError:
            self._withdraw(type_name, waiting)
            raise

    def stop(self) -> None:
        """The worker stops: run every open batch now (a stage's ``stop``)."""
        self.flush_all()

    def flush_all(self) -> None:
        """Run every open batch now, and any later delivery at once (the worker stops)."""
        self._stopping = True
        for type_name in list(self._open):
            self._flush(type_name, STOPPING)

    @property
    def waiting(self) -> int:
        """Deliveries in open batches, not yet handed to their handler."""
        return sum(len(batch) for batch in self._open.values())

    def _flush(self, type_name: str, trigger: str) -> None:
        timer = self._timers.pop(type_name, None)
        if timer is not None:
            timer.cancel()
        batch = [w for w in self._open.pop(type_name, []) if not w.future.done()]
        if not batch:
            return
        self._hooks.batch_flushed(self._queue, type_name, len(batch), trigger)
        task = asyncio.create_task(self._run(type_name, batch))
        self._running[task] = batch
        task.add_done_callback(self._ran)

    def _ran(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)

    async def _run(self, type_name: str, batch: list[_Waiting]) -> None:
        handler = self._handlers[type_name]
        try:
            outcomes = await run_batch(handler, type_name, self._queue, [w.item for w in batch])
        except asyncio.CancelledError:
            for w in batch:
                w.future.cancel()  # each delivery's task returns its message
            raise
        except Exception as exc:  # a bug: each message fails its attempt, none is lost
            log.exception("batch of %d %s message(s) failed to run", len(batch), type_name)
            outcomes = [failed(handler.retry, type_name, w.item.attempt, exc) for w in batch]
        for w, outcome in zip(batch, outcomes, strict=True):
            if not w.future.done():
                w.future.set_result(outcome)

    def _withdraw(self, type_name: str, waiting: _Waiting) -> None:
        batch = self._open.get(type_name)
        if batch is not None and waiting in batch:
            batch.remove(waiting)
            if not batch:
                del self._open[type_name]
                timer = self._timers.pop(type_name, None)
                if timer is not None:
                    timer.cancel()
            return
        for task, running in self._running.items():
            if any(w is waiting for w in running):
                task.cancel()
                return


async def alone(job: Job, call_next: Next) -> Outcome:
    """The batch stage without a :class:`Batcher` (``rabbitq.testing.deliver``): a
    batch handler's message runs as a batch of one."""

    async def one(type_name: str, message: Any, delivery: Any, attempt: int) -> Outcome:
        handler = job.handler
        assert handler is not None
        (outcome,) = await run_batch(
            handler, type_name, job.queue, [BatchItem(message, delivery, attempt)]
        )
        return outcome

    return await _batched(job, call_next, one)


async def _batched(job: Job, call_next: Next, submit: Any) -> Outcome:
    handler = job.handler
    if handler is None or handler.batch is None:  # not a batch handler's: the rest runs
        return await call_next(job)
    if job.flow is not None:
        error = PermanentError(f"{job.type_name} has a batch handler: it cannot be a workflow step")
        return job.fail(error)
    outcome: Outcome = await submit(job.type_name, job.message, job.delivery, job.attempt)
    return outcome
