"""The delivery stage ``superseded``: a debounced message runs only if it is still its
key's latest (docs/control.md, "Debounce").

A delivery without the ``rabbitq-debounce-key`` header passes on at the cost of one
header lookup. One with it asks the key store (:meth:`~.store.KeyStore.check`, one
round trip): superseded, it is acked unrun (status ``superseded``); the latest with a
newer publish of its key still on its way, it comes back in a second through the delay
ladder (no attempt used): that publish may yet fail; the latest, it runs, and once
acked ends its key's burst (compare-and-delete: a publish landing meanwhile starts a
new burst).

The key is cleared only after the handler's outcome, so a worker killed at any moment
sees the same message still the latest when it is delivered again: run again, it is
handled once with the app's idempotency store (keyed by message id, the default), at
least once without one. A message dead-lettered keeps the key (a replay of it runs);
purging it from the DLQ ends the burst (:mod:`.release`).

A key store that lost its data (Redis restarted without persistence): a message whose
key has no record under another epoch than its publish's runs (the check says RUN; a
stale payload may run, the last one does). A key store that cannot be reached: the
message is held, as the cancel stage holds one, in the delay ladder for :data:`HOLD`
seconds without using an attempt, until the store answers.
"""

from __future__ import annotations

import logging

from .._amqp import headers as h
from ..effects.store import StoreUnavailable
from ..errors import RetryLater
from ..job import Job, Next
from ..outcome import ACK, Outcome
from ..retry import after_retry_later
from ..status.model import SUPERSEDED
from .store import RUN, WAIT, KeyStore

log = logging.getLogger("rabbitq.unique")
LOOK_AGAIN = 1.0  # seconds before the latest looks again while a newer one is pending
HOLD = 5.0
"""Seconds a debounced message waits in the delay ladder while its key store cannot be
reached (no attempt used)."""


class SupersededStage:
    """Acks a debounced message that a later publish of its key replaced."""

    name = "superseded"

    def __init__(self, store: KeyStore) -> None:
        self.store = store

    async def __call__(self, job: Job, call_next: Next) -> Outcome:
        raw = job.headers.get(h.DEBOUNCE_KEY)
        if raw is None or job.handler is None:
            return await call_next(job)
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        mid = job.message_id
        published_in = job.headers.get(h.DEBOUNCE_EPOCH)
        if isinstance(published_in, bytes):
            published_in = published_in.decode("utf-8", "replace")
        try:
            verdict = await self.store.check(key, mid, published_in or None)
        except StoreUnavailable as exc:
            return self._hold(job, exc)
        if verdict == WAIT:
            later = after_retry_later(job.handler.retry, job.attempt, RetryLater(LOOK_AGAIN))
            return Outcome(later, job.type_name, job.attempt)
        if verdict != RUN:
            return job.skip(SUPERSEDED)
        outcome = await call_next(job)
        if outcome.decision is ACK:
            try:
                await self.store.finish(key, mid)
            except StoreUnavailable as exc:  # acked: it stays the latest, never run again
                log.warning("debounce key %r: could not end the burst of %s: %s", key, mid, exc)
        return outcome

    def _hold(self, job: Job, exc: Exception) -> Outcome:
        assert job.handler is not None
        error = f"KeyStoreUnavailable: cannot tell whether it was superseded ({exc})"
        log.warning("message %s held for %gs: %s", job.message_id, HOLD, error)
        later = after_retry_later(job.handler.retry, job.attempt, RetryLater(HOLD))
        return Outcome(later, job.type_name, job.attempt, error=h.truncate_utf8(error, 1024))
