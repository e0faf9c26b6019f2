"""Where unique and debounce keys are held: the :class:`KeyStore` protocol, and the
decision a debounced delivery comes to (:func:`decide`, pure).

A **unique** key is held by one message id until its window ends: first for a short
lease while its publish is on its way (:data:`PENDING_LEASE`), then, once the broker
confirmed it, for the rest of the window. A **debounce** key names the burst's
``latest`` message (confirmed), and the ``pending`` one whose publish is on its way,
with that publish's lease.

A store that cannot be reached raises :class:`~rabbitq.effects.StoreUnavailable`.
"""

from __future__ import annotations

from typing import Protocol

PENDING_LEASE = 120.0
"""Seconds a key is held for a publish not yet confirmed: a publisher killed between
taking a key and its confirm holds it this long, not its whole window."""

RUN, SUPERSEDED, WAIT = "run", "superseded", "wait"
"""What a debounced delivery comes to: run it, ack it unrun, or look again shortly."""


class KeyStore(Protocol):
    """The unique and debounce keys of an app (PostgreSQL or Redis)."""

    async def take(self, key: str, message_id: str, lease: float) -> str | None:
        """Hold ``key`` for ``message_id`` for ``lease`` seconds if it is free: None;
        else the id of the message holding it (``message_id`` itself, published again)."""

    async def hold(self, key: str, message_id: str, seconds: float) -> None:
        """Keep ``key`` held ``seconds`` from now, if ``message_id`` holds it."""

    async def release(self, key: str, message_id: str) -> None:
        """Free ``key`` if ``message_id`` holds it."""

    async def propose(self, key: str, message_id: str, lease: float) -> str:
        """Debounce: ``message_id`` is on its way as the key's ``pending`` one. Returns
        the store's epoch for the message to carry (``""``: a store without one,
        PostgreSQL; :mod:`rabbitq.effects.epoch`)."""

    async def commit(self, key: str, message_id: str) -> None:
        """Debounce: ``message_id`` was confirmed: the key's ``latest`` (and no longer
        its pending one)."""

    async def withdraw(self, key: str, message_id: str) -> None:
        """Debounce: ``message_id``'s publish failed: no longer pending."""

    async def check(self, key: str, message_id: str, published_in: str | None = None) -> str:
        """Debounce, as ``message_id`` is delivered: :data:`RUN`, :data:`SUPERSEDED` or
        :data:`WAIT` (:func:`decide`); a delivered pending one becomes the latest.
        ``published_in``: the epoch its publish was given; the key's record gone and the
        store's epoch another one, the record was lost with the store's data: RUN."""

    async def finish(self, key: str, message_id: str) -> None:
        """Debounce: ``message_id`` ran (or left for good): the key's burst ends, if it
        is still the latest."""

    async def close(self) -> None:
        """Close the connections (opened again on next use)."""


def decide(latest: str | None, waiting: bool, message_id: str, *, lost: bool = False) -> str:
    """A debounced delivery's fate (pure): ``latest`` is the key's latest message (after
    a delivered pending one was made the latest), ``waiting`` whether a newer publish of
    the key is on its way. The latest runs, unless a newer one may still come (then it
    looks again: that publish may fail); any other is superseded, one already run too.
    ``lost``: the key's record was lost with the store's data: it runs (fail safe: a
    stale payload may run, the last one must)."""
    if lost:
        return RUN
    if latest != message_id:
        return SUPERSEDED
    return WAIT if waiting else RUN
