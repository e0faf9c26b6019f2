"""``app.cancel(message_id, ...)``: record the cancellations, then say per message what
it was (from the app's status store, when it has one) and mark the pending ones
``cancelled`` in it (I/O at the edge; the meaning is :func:`.model.report`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigurationError
from ..status.lookup import message_status
from ..status.model import CANCELLED, Record
from .model import NO_STATUS, CancelReport, pending, report
from .stage import CancelStage

READS = 8  # status reads in flight at once (a store's pool is small)


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
    await stage.store.add(list(dict.fromkeys(ids)))
    writer = app.status_writer
    unique = list(dict.fromkeys(ids))
    reads = asyncio.Semaphore(READS)
    answers = await asyncio.gather(*(_report(writer, m, reads) for m in unique))
    found = dict(zip(unique, answers, strict=True))
    if writer is not None:
        now = time.time()
        for mid in pending(found):
            writer.add(Record(mid, CANCELLED, now, None, {"requested": True}))
        await writer.flush()
    return [found[mid] for mid in ids]


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
