"""A store that lost its data: the epoch of a Redis, and whether it persists at all.

A Redis restarted without persistence (or from an old snapshot, or flushed) comes back
without the keys it held: cancellations, debounce records. Nothing in the store says
so; an absent key reads as "never written". So beside them, one key
(``<base>store-epoch``, never expiring) names the store's life: written once, if
absent (``SET ... NX``), by the first process that needs it, as ``<random>@<unix
time>``. While the data lasts, so does the key; a store that lost its data has none
(the next use writes a new one), so every process that saw the old epoch sees another:
:class:`EpochWatch` tells it once, with the time the new one was written (the
cancellations recorded before it may be lost). A debounced message carries the epoch
of its publish: a record gone with a newer epoch was lost, not ended.

The shared concurrency cap fences a restarted Redis the same way
(:mod:`rabbitq.ratelimit.lease`, its ``<set>:epoch``). PostgreSQL keeps what it
committed: it has no epoch.

:func:`persistence` reads a Redis's settings (``CONFIG GET appendonly``, ``save``);
:func:`persistence_problem` says, as one line, why a restart loses its data (pure).
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import UTC, datetime
from typing import Any

EPOCH_KEY = "store-epoch"
"""The epoch's key, after the store's key base."""

log = logging.getLogger("rabbitq.worker")


def new_epoch(now: float | None = None) -> str:
    """A fresh epoch: ``<12 hex>@<unix time>`` (pure but for the random part)."""
    at = time.time() if now is None else now
    return f"{uuid.uuid4().hex[:12]}@{at:.3f}"


def epoch_time(epoch: str | None) -> float | None:
    """When ``epoch`` was written (unix seconds), None if it says no time (pure)."""
    if not epoch or "@" not in epoch:
        return None
    try:
        return float(epoch.rsplit("@", 1)[1])
    except ValueError:
        return None


def when(epoch: str | None) -> str:
    """``epoch``'s time as ``YYYY-MM-DD HH:MM:SS UTC`` (``an unknown time``) (pure)."""
    at = epoch_time(epoch)
    if at is None:
        return "an unknown time"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def text(value: bytes | str | None) -> str | None:
    """A Redis reply as text (None stays None)."""
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class EpochWatch:
    """The epochs this process saw of one store, and a WARNING when a new one follows
    another: the store lost its data (``what`` recorded before the new one may be
    lost). An epoch seen before (an old one read off a message) says nothing new."""

    def __init__(self, store: str, what: str) -> None:
        self.store = store
        self.what = what
        self.seen: list[str] = []
        self.changes = 0

    def saw(self, epoch: str | None) -> bool:
        """Note ``epoch`` (None or empty: unknown, ignored); True when it is new after
        another one (logged once per change)."""
        if not epoch or epoch in self.seen:
            return False
        self.seen = [*self.seen[-7:], epoch]
        if len(self.seen) == 1:
            return False
        self.changes += 1
        log.warning(
            "%s lost its data (a restart without persistence, or a flush): its epoch is "
            "%s, written at %s; %s recorded before %s may be lost",
            self.store, epoch, when(epoch), self.what, when(epoch),
        )  # fmt: skip
        return True


async def current(client: Any, key: str) -> str:
    """The epoch at ``key`` of the Redis ``client``, written now if it has none (one
    ``SET NX`` and one ``GET`` in a pipeline: of two writers racing, one epoch)."""
    pipe = client.pipeline(transaction=False)
    pipe.set(key, new_epoch(), nx=True)
    pipe.get(key)
    _, value = await pipe.execute()
    return text(value) or ""


async def persistence(client: Any) -> tuple[str | None, str | None]:
    """``appendonly`` and ``save`` of the Redis ``client`` (None each: CONFIG refused,
    as on managed Redis that renames it)."""
    from redis.exceptions import ResponseError

    try:
        aof = await client.config_get("appendonly")
        save = await client.config_get("save")
    except ResponseError:
        return None, None
    return text(aof.get("appendonly")), text(save.get("save"))


def persistence_problem(appendonly: str | None, save: str | None) -> str | None:
    """Why a restart of that Redis loses its data (pure): None when it keeps an AOF
    (``appendonly yes``) or RDB snapshots (``save`` not empty), or when neither setting
    could be read."""
    if appendonly is None and save is None:
        return None
    if (appendonly or "").strip().lower() == "yes" or (save or "").strip():
        return None
    return 'it keeps no persistence (appendonly no, save ""): a restart loses every key'


def durable(appendonly: str | None, save: str | None) -> bool | None:
    """Whether a write that Redis answered survives its restart (pure): with an AOF
    (``appendonly yes``); not with RDB snapshots only (what was written since the last
    one is lost) nor without persistence; None when the settings could not be read."""
    if appendonly is None and save is None:
        return None
    return (appendonly or "").strip().lower() == "yes"
