"""A pending blob's lease: the publisher holds it while the publish that references the
blob waits for the broker's confirm, so that the sweep never takes a blob whose message
may still be stored.

A blob is uploaded ``pending`` with a ``sweep_after`` of ``orphan_after`` past its
message's due time. Before, nothing moved it: a publish held longer than
``orphan_after`` (a frozen or blocked broker, a stalled network) found its blob swept
when the confirm came, and the message was dead-lettered ``blob-missing``. Now the
publisher pushes ``sweep_after`` forward every :func:`renew_every` while it waits, so a
pending blob is swept only once ``orphan_after`` has passed since its publisher last
showed it was waiting: the publisher is gone (killed, or frozen that long), or its
publish ended. How it ended decides the rest (:func:`never_stored`): a publish that the
broker refused, returned or never got deletes its upload at once; one whose outcome is
unknown (no confirm in time, the connection lost after the send) keeps it ``orphan_after``
from then, for the message that may be in a queue anyway.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from ..errors import (
    BrokerUnavailable,
    PublishError,
    PublishInterrupted,
    PublishNacked,
    RabbitqError,
    Unroutable,
)
from .store import BlobStore

log = logging.getLogger("rabbitq.payloads")

MIN_RENEW_EVERY = 0.1  # seconds: an ``orphan_after`` of 0 (tests) renews this often


def renew_every(orphan_after: timedelta) -> float:
    """Seconds between two renewals (pure): three per ``orphan_after``, so that one late
    renewal still lands before the lease runs out."""
    return max(MIN_RENEW_EVERY, orphan_after.total_seconds() / 3)


def never_stored(exc: BaseException) -> bool:
    """Whether a publish that raised ``exc`` certainly left nothing in the broker (pure):
    refused (nacked), returned (unroutable), interrupted before anything was sent, or
    stopped by rabbitq before the send (a bad delay, a configuration). A confirm that did
    not come, a lost connection, a cancellation: the message may be stored."""
    if isinstance(exc, Unroutable | PublishNacked):
        return True
    if isinstance(exc, PublishInterrupted):
        return "nothing was sent" in str(exc)
    if isinstance(exc, PublishError | BrokerUnavailable):
        return False
    return isinstance(exc, RabbitqError)


async def hold(
    store: BlobStore, blob_id: str, until: Callable[[], datetime], orphan_after: timedelta
) -> None:
    """Renew the lease of ``blob_id`` (its ``sweep_after`` moved to ``until()``) every
    :func:`renew_every` until cancelled; a renewal that fails is logged and tried again
    at the next turn (the lease set before still holds meanwhile)."""
    every = renew_every(orphan_after)
    while True:
        await asyncio.sleep(every)
        try:
            await store.renew(blob_id, until())
        except Exception as exc:
            log.warning("could not renew the lease of the large payload %s: %s", blob_id, exc)
