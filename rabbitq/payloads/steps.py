"""The publisher's ``offload`` step and the worker's ``fetch`` stage: a body above the
store's ``above`` size travels as a reference (:mod:`.reference`), and the handler
receives the full message as before.

Publish: upload (pending), send while holding the blob's lease (:mod:`.lease`: the
sweep leaves it alone while the confirm is awaited), then mark it sent; a send that
certainly stored nothing deletes the upload, one that may have stored the message keeps
it (the sweep deletes what a killed publisher or an unknown outcome left). Deliver: fetch
(a pending blob's message reached its queue: marked sent), check its digest, run the
rest; when the rest acks the message (handled, a duplicate, cancelled, superseded), the
blob is done: its data deleted, a tombstone kept. A retry, a dead letter or a requeue
keeps the blob for the copy that references it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from .._amqp.outgoing import Outgoing, SendNext, add_step
from ..job import Job, Next, add_stage
from ..outcome import REQUEUE, DeadLetter, Outcome, Retry
from . import lease
from .reference import new_ref, offloads, ref_of, sweep_after
from .store import BlobStore

log = logging.getLogger("rabbitq.payloads")

# The dead-letter reason of a message whose blob is missing or does not match.
BLOB_MISSING = "blob-missing"


class Offload:
    """The publish step ``offload``: moves a large body into ``store``."""

    name = "offload"

    def __init__(self, store: BlobStore) -> None:
        self.store = store

    async def __call__(self, out: Outgoing, call_next: SendNext) -> str:
        if not offloads(len(out.body), self.store.above):
            return await call_next(out)
        body, ref = out.body, new_ref(out.body)
        orphan_after = getattr(self.store, "orphan_after", None)
        assert orphan_after is not None

        def until() -> datetime:  # the lease's end, from now
            return sweep_after(datetime.now(UTC), out.delay, out.at, orphan_after)

        await self.store.put(ref, body, until())
        out.body = b""
        out.headers.update(ref.headers())
        holding = asyncio.create_task(lease.hold(self.store, ref.id, until, orphan_after))
        try:
            message_id = await call_next(out)
        except BaseException as exc:
            await _release(holding)
            out.body = body
            if lease.never_stored(exc):
                await asyncio.shield(_forget(self.store, ref.id))
            else:  # it may be in a queue: kept orphan_after from now, then swept
                await asyncio.shield(_quietly(self.store.renew(ref.id, until()), "keep", ref.id))
                log.warning("large payload %s kept: its publish may have been stored (%s)",
                            ref.id, exc)  # fmt: skip
            raise
        try:  # marked sent while the lease still holds: a publisher killed between the
            # confirm and this mark must not leave a blob whose lease ran out meanwhile
            # (the release awaits a renewal in flight, which may take a while)
            await self.store.sent(ref.id)
        except Exception as exc:  # sent anyway: the fetch marks it, well before a sweep
            log.warning("large payload %s sent, not marked sent yet: %s", ref.id, exc)
        finally:  # renewing a sent blob changes nothing (renew moves pending ones only)
            await _release(holding)
        return message_id


async def _release(holding: asyncio.Task[None]) -> None:
    """The publish ended: stop renewing (a failed one's before its blob is deleted or
    kept; a confirmed one's once its blob is marked sent)."""
    holding.cancel()
    await asyncio.gather(holding, return_exceptions=True)


async def _forget(store: BlobStore, blob_id: str) -> None:
    """A failed publish's upload, deleted (else swept later as an orphan)."""
    await _quietly(_deleted(store, blob_id), "delete the failed publish's", blob_id)


async def _deleted(store: BlobStore, blob_id: str) -> None:
    await store.delete([blob_id])


class Fetch:
    """The delivery stage ``fetch``: the body back from ``store`` before decode."""

    name = "fetch"

    def __init__(self, store: BlobStore) -> None:
        self.store = store

    async def __call__(self, job: Job, call_next: Next) -> Outcome:
        ref = ref_of(job.headers)
        if ref is None:
            return await call_next(job)
        try:
            found = await self.store.get(ref.id)
        except Exception as exc:  # the store is down: a failed attempt, retried
            return job.fail(exc)
        if found is not None and found.state == "done":
            log.info("message %s: its large payload was handled before; acked", job.message_id)
            return job.ack()
        if found is None or found.data is None or not ref.matches(found.data):
            what = "is not in" if found is None else "does not match its digest in"
            error = f"BlobMissing: payload {ref.id} {what} {self.store!r}"
            return job.dead_letter(BLOB_MISSING, error)
        if found.state == "pending":  # a confirm the publisher did not live to mark
            await _quietly(self.store.sent(ref.id), "mark sent", ref.id)
        job.body = found.data
        outcome = await call_next(job)
        if handled(outcome):
            await _quietly(self.store.done(ref.id), "delete", ref.id)
        return outcome


def handled(outcome: Outcome) -> bool:
    """The message is settled for good by an ack: no copy references its blob."""
    decision = outcome.decision
    return decision is not REQUEUE and not isinstance(decision, Retry | DeadLetter)


async def _quietly(call: Awaitable[None], what: str, blob_id: str) -> None:
    try:
        await call
    except Exception as exc:  # the handler's outcome stands; the blob is kept
        log.warning("could not %s the large payload %s: %s", what, blob_id, exc)


def blobs_released(
    store: BlobStore,
) -> Callable[[Sequence[tuple[Mapping[str, Any], str]]], Awaitable[None]]:
    """What a DLQ purge calls with the messages it deleted: their blobs deleted."""

    async def release(gone: Sequence[tuple[Mapping[str, Any], str]]) -> None:
        ids = [ref.id for h, _ in gone if (ref := ref_of(h)) is not None]
        if ids:
            await store.delete(ids)

    return release


def with_blobs(app: Any, store: BlobStore | None) -> tuple[Any, Any]:
    """``app``'s publish steps and delivery stages, with the ``offload`` step and the
    ``fetch`` stage of ``store`` if it has one (``App(large_payloads=...)``)."""
    if store is None:
        return app.publish_steps, app.delivery_stages
    return add_step(app.publish_steps, Offload(store)), add_stage(app.delivery_stages, Fetch(store))
