"""The delivery stage ``cancelled`` (``App(cancellable=True)``): a message that was
cancelled is acked when it arrives and never handled; a running one's
``ctx.cancelled`` turns true.

Arrival: the message id is looked up in the cancellations store. The lookups of every
delivery that arrives within a window of 2 ms (or the first 256 of them) go in one
query (:class:`~rabbitq.cancellation.lookups.Lookups`: one ``MGET``, one
``SELECT ... = ANY``), so a busy worker pays one round trip per window, not per few
messages; each answer is still read after its delivery arrived.

Running: the stage registers the message *before* its lookup and keeps it registered
until the handler returns. While any is registered, one poll every
:data:`POLL_INTERVAL` asks the store which of them were cancelled since, and sets their
flag. A cancel written after the lookup read the store (between the check and the
handler's start, or while it runs) is therefore seen within one poll interval and a
round trip: none is lost. Polling rather than a broadcast on the broker: it needs no
topology, no consumer to keep alive, and a worker that was disconnected or started
late misses nothing, because the store is the one record.

A store that cannot be read: the message is not run but held, in the delay ladder for
:data:`HOLD` seconds without using an attempt, until the store answers. Running a
cancelled payment capture (charging for a cancelled order) is worse than capturing a
few seconds late; see docs/control.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Sequence

from .._amqp import headers as h
from ..context import CancelFlag
from ..errors import RetryLater
from ..job import Job, Next
from ..outcome import ACK, Outcome
from ..retry import after_retry_later
from ..status.model import CANCELLED
from .lookups import MAX_IDS, WINDOW, Lookups
from .store import CancelStore, cancel_store

log = logging.getLogger("rabbitq.worker")

POLL_INTERVAL = 1.0
"""Seconds between two asks of the store for the running messages' cancellations."""
HOLD = 5.0
"""Seconds a message waits in the delay ladder while the store cannot be read."""


class CancelStage:
    """The ``cancelled`` stage of an app's deliveries, over ``store``."""

    name = "cancelled"

    def __init__(
        self,
        store: CancelStore,
        *,
        poll_interval: float = POLL_INTERVAL,
        window: float = WINDOW,
        max_ids: int = MAX_IDS,
    ) -> None:
        self.store = store
        self.poll_interval = poll_interval
        self.running: dict[str, list[CancelFlag]] = {}
        self.lookups = Lookups(self._which, window=window, max_ids=max_ids)
        self._poller: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"CancelStage({self.store!r})"

    def _which(self, ids: Sequence[str]) -> Awaitable[set[str]]:
        return self.store.which(ids)  # the store's, as it is when a window ends

    async def __call__(self, job: Job, call_next: Next) -> Outcome:
        if job.handler is None:  # dead-lettered as unknown-type by decode: nothing to run
            return await call_next(job)
        mid = job.message_id
        flag = CancelFlag()
        self._register(mid, flag)
        try:
            try:
                cancelled = await self.lookups.ask(mid)
            except Exception as exc:  # the store cannot be read: hold the message
                return self._hold(job, exc)
            if cancelled:
                return Outcome(ACK, job.type_name, job.attempt, skipped=CANCELLED)
            job.cancel_flag = flag
            return await call_next(job)
        finally:
            self._unregister(mid, flag)

    def _hold(self, job: Job, exc: Exception) -> Outcome:
        assert job.handler is not None
        error = f"CancelStoreUnavailable: cannot tell whether it was cancelled ({exc})"
        log.warning("message %s held for %gs: %s", job.message_id, HOLD, error)
        later = after_retry_later(job.handler.retry, job.attempt, RetryLater(HOLD))
        return Outcome(later, job.type_name, job.attempt, error=h.truncate_utf8(error, 1024))

    def _register(self, mid: str, flag: CancelFlag) -> None:
        self.running.setdefault(mid, []).append(flag)
        poller = self._poller
        if poller is None or poller.done() or poller.get_loop() is not asyncio.get_running_loop():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    def _unregister(self, mid: str, flag: CancelFlag) -> None:
        flags = self.running.get(mid)
        if flags is None:
            return
        if flag in flags:  # (no context manager: this runs once per delivery)
            flags.remove(flag)
        if not flags:
            del self.running[mid]

    async def _poll(self) -> None:
        """While messages are registered: every poll interval, set the flags of those
        cancelled since. Ends when none is left (the next arrival starts it again)."""
        while self.running:
            await asyncio.sleep(self.poll_interval)
            ids = [mid for mid, flags in self.running.items() if not all(f.is_set for f in flags)]
            if not ids:
                continue
            try:
                found = await self.store.which(ids)
            except Exception as exc:  # the next poll tries again
                log.warning("cannot poll the cancellations of running messages: %s", exc)
                continue
            for mid in found:
                for flag in self.running.get(mid, ()):
                    flag.set()

    async def aclose(self) -> None:
        """The worker closes: stop polling, close the store's connections."""
        poller, self._poller = self._poller, None
        if poller is not None and poller.get_loop() is asyncio.get_running_loop():
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        await self.lookups.drain()
        await self.store.close()


class KnownCancel:
    """A ``cancelled`` stage that knows the answer, for ``rabbitq.testing``'s
    ``deliver(..., cancelled=...)``: True acks the message unrun; ``"running"`` runs
    it with ``ctx.cancelled`` already true."""

    name = "cancelled"

    def __init__(self, running: bool) -> None:
        self.running = running

    async def __call__(self, job: Job, call_next: Next) -> Outcome:
        if not self.running:
            return Outcome(ACK, job.type_name, job.attempt, skipped=CANCELLED)
        job.cancel_flag = CancelFlag(True)
        return await call_next(job)


def cancel_stage(*stores: object) -> CancelStage:
    """``App(cancellable=True)``'s stage, its store beside the first of ``stores`` (the
    backend, the idempotency store, the status store) that has a location."""
    return CancelStage(cancel_store(stores))
