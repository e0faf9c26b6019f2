"""The publish steps of unique and debounced publishes (``publish(unique_for=...)``,
``publish(debounce=..., unique_key=...)``; docs/control.md).

**unique**: take the key (free or expired), send, then hold it for the rest of the
window; the same message id published again within it is refused like any other. The
key is taken for :data:`~.store.PENDING_LEASE` only until the broker confirmed the
message, so a publisher killed in between holds it that long, not for the window; a
send that fails (or is cancelled) releases it, compare-and-delete, before the error goes
on. A key held by another message: nothing is sent, the holder's id is returned, and a
``deduplicated`` status record is written under this publish's own id.

**debounce**: the key's pending message is this one (with the same lease), it is sent
into the delay ladder for ``debounce`` seconds, and once confirmed it is the key's
latest. A failed send withdraws it. Written before the send, so a newer message can
never be delivered before the store knows of it; a confirm not recorded (the store
unreachable just then) is recorded by the worker when the message arrives. The message
carries the key store's epoch (Redis; :mod:`rabbitq.effects.epoch`): a worker that finds
its key's record gone under another epoch runs it rather than supersede it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .._amqp import headers as h
from .._amqp.outgoing import Outgoing, SendNext
from ..errors import ConfigurationError
from ..ladder import plan as ladder
from ..status.model import DEDUPLICATED, Record
from ..status.writer import StatusWriter
from .store import PENDING_LEASE, KeyStore

log = logging.getLogger("rabbitq.unique")
MAX_KEY = 512  # characters


def seconds(name: str, value: Any) -> float:
    """``value`` as positive seconds, else a one-line ConfigurationError (pure)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"{name} must be positive seconds, not {value!r}")
    return float(value)


def check_key(key: Any) -> str:
    """``key`` if it is a non-empty string of at most :data:`MAX_KEY` characters (pure)."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise ConfigurationError(
            f"unique_key must be a non-empty string of at most {MAX_KEY} characters, not {key!r}"
        )
    return key


async def undo_quietly(undo: Any, key: str, mid: str) -> None:
    """``await undo(key, mid)`` after a failed send; its own failure is logged (the key
    is then held until its lease ends), the send's error is the one raised."""
    try:
        await undo(key, mid)
    except Exception as exc:
        log.warning("could not free key %r of unsent %s: %s", key, mid, exc)


class UniqueStep:
    """``publish(unique_for=S, unique_key=K)``: at most one message of K per window."""

    name = "unique"

    def __init__(self, store: KeyStore, writer: StatusWriter | None) -> None:
        self.store = store
        self.writer = writer

    async def __call__(self, out: Outgoing, call_next: SendNext) -> str:
        options = out.options
        if options.get("unique_for") is None:
            if options.get("unique_key") is not None and options.get("debounce") is None:
                raise ConfigurationError("unique_key needs unique_for= (or debounce=)")
            return await call_next(out)
        if options.get("debounce") is not None:
            raise ConfigurationError("give unique_for= or debounce=, not both")
        window = seconds("unique_for", options["unique_for"])
        mid = out.message_id
        key = mid if options.get("unique_key") is None else check_key(options["unique_key"])
        taken = time.monotonic()
        holder = await self.store.take(key, mid, min(window, PENDING_LEASE))
        if holder is not None:
            if self.writer is not None:
                detail = {"type": out.type_name, "key": key, "first": holder}
                self.writer.add(Record(mid, DEDUPLICATED, time.time(), None, detail))
            return holder
        out.headers[h.UNIQUE_KEY] = key
        try:
            sent = await call_next(out)
        except BaseException:
            await undo_quietly(self.store.release, key, mid)
            raise
        if window > PENDING_LEASE:
            left = window - (time.monotonic() - taken)
            try:
                await self.store.hold(key, mid, max(left, 0.001))
            except Exception as exc:  # sent: the key is held for the lease only
                log.warning("unique key %r of %s held %gs only: %s", key, mid, PENDING_LEASE, exc)
        return sent


class DebounceStep:
    """``publish(debounce=S, unique_key=K)``: K's handler runs S seconds after K's last
    publish, with the last payload; the earlier ones are superseded."""

    name = "debounce"

    def __init__(self, store: KeyStore) -> None:
        self.store = store

    async def __call__(self, out: Outgoing, call_next: SendNext) -> str:
        options = out.options
        if options.get("debounce") is None:
            return await call_next(out)
        wait = seconds("debounce", options["debounce"])
        if options.get("unique_key") is None:
            raise ConfigurationError("debounce needs unique_key=: the key of the burst")
        if out.delayed:
            raise ConfigurationError("debounce delays the message itself: no delay= or at=")
        key, mid = check_key(options["unique_key"]), out.message_id
        ladder.due_in(delay=wait)  # within the ladder, checked before the store is
        out.delay = wait
        out.headers[h.DEBOUNCE_KEY] = key
        published_in = await self.store.propose(key, mid, PENDING_LEASE)
        if published_in:  # the store's epoch: its record lost, not ended, if it changes
            out.headers[h.DEBOUNCE_EPOCH] = published_in
        try:
            sent = await call_next(out)
        except BaseException:
            await undo_quietly(self.store.withdraw, key, mid)
            raise
        try:
            await self.store.commit(key, mid)
        except Exception as exc:  # the worker records it when the message arrives
            log.warning("debounce key %r: %s confirmed, not yet recorded: %s", key, mid, exc)
        return sent
