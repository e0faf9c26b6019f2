"""``app.cancel(message_id, ...)``: record the cancellations, then say per message what
it was (from the app's status store, when it has one) and mark the pending ones
``cancelled`` in it (I/O at the edge; the meaning is :func:`.model.report`).

A message published a moment ago has no status record yet: the publisher queues its
``published`` record and writes it within its writer's interval. So the records this
process queued are written first (a cancel right after a publish of the same app finds
its message ``published``: ``stops_it``), and an id without any record is looked up
once more :data:`RECHECK` seconds later (one published by another process), before it
is reported ``unknown``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigurationError
from ..status.lookup import message_status
from ..status.model import CANCELLED, Record
from .model import NO_STATUS, UNKNOWN, CancelReport, pending, report, with_durability
from .stage import CancelStage

READS = 8  # status reads in flight at once (a store's pool is small)
RECHECK = 1.0
"""Seconds before an id without a status record is looked up again: a publisher's
status writer writes within its interval (0.2 s) and a round trip."""


def can_cancel(app: Any) -> bool:
    """Whether ``app`` was made with ``App(cancellable=True)``."""
    return any(isinstance(stage, CancelStage) for stage in app.delivery_stages)


async def close_stores(app: Any) -> None:
    """Close the cancellations store and the status store of ``app`` (a one-off caller:
    the CLI, a console page)."""
    await stage_of(app).store.close()
    if app.status_writer is not None:
        await app.status_writer.store.close()


def stage_of(app: Any) -> CancelStage:
    """``app``'s cancel stage; a ConfigurationError (one line) for an app without one."""
    for stage in app.delivery_stages:
        if isinstance(stage, CancelStage):
            return stage
    raise ConfigurationError(f"{app!r} cannot cancel: give it App(cancellable=True, backend=...)")


async def cancel(app: Any, message_ids: Sequence[str]) -> list[CancelReport]:
    """Cancel ``message_ids`` (see :meth:`rabbitq.App.cancel`); one report per id, in
    order (an id given twice is reported twice)."""
    ids = [str(mid) for mid in message_ids]
    if not ids or any(not mid for mid in ids):
        raise ValueError("cancel needs message ids (non-empty strings)")
    stage = stage_of(app)
    unique = list(dict.fromkeys(ids))
    await stage.store.add(unique)
    durable = await _durable(stage.store)
    writer = app.status_writer
    if writer is not None:  # this process's own records first: its publishes' included
        await writer.flush(close=False)
    found = await _reports(writer, unique)
    unknown = [mid for mid in unique if found[mid].outcome == UNKNOWN]
    if unknown:  # published elsewhere a moment ago: its record may be on its way
        await asyncio.sleep(RECHECK)
        found.update(await _reports(writer, unknown))
    found = {mid: with_durability(r, durable) for mid, r in found.items()}
    if writer is not None:
        now = time.time()
        for mid in pending(found):
            writer.add(Record(mid, CANCELLED, now, None, {"requested": True}))
        await writer.flush()
    return [found[mid] for mid in ids]


async def _durable(store: Any) -> bool | None:
    try:
        durable: bool | None = await store.durable()
    except Exception:  # the cancellations are recorded; their durability is not known
        return None
    return durable


async def _reports(writer: Any, message_ids: Sequence[str]) -> dict[str, CancelReport]:
    reads = asyncio.Semaphore(READS)
    answers = await asyncio.gather(*(_report(writer, m, reads) for m in message_ids))
    return dict(zip(message_ids, answers, strict=True))


async def _report(writer: Any, message_id: str, reads: asyncio.Semaphore) -> CancelReport:
    if writer is None:
        return report(message_id, None, has_status=False)
    try:
        async with reads:
            status = await message_status(writer.store, message_id)
    except Exception as exc:  # the cancellation is recorded all the same
        text = f"cancelled if it arrives; its state is unknown (status store: {exc})"
        return CancelReport(message_id, NO_STATUS, text)
    return report(message_id, status, has_status=True)
