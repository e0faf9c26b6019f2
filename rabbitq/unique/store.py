"""Where unique and debounce keys are held: the :class:`KeyStore` protocol, and the
decision a debounced delivery comes to (:func:`decide`, pure).

A **unique** key is held by one message id until its window ends: first *pending*, for
a short lease (:data:`UNIQUE_LEASE`) that its publisher renews while the publish is on
its way, then, once the broker confirmed it, *confirmed* for the rest of the window. A
refusal names only a confirmed holder: a publisher that finds the key pending waits
(:func:`poll_waits`) until the holder is confirmed, or its publish failed, or its lease
lapsed (its publisher died: ``kill -9``), and then sends its own. A **debounce** key
names the burst's ``latest`` message (confirmed), and the ``pending`` one whose publish
is on its way, with that publish's lease (:data:`PENDING_LEASE`).

A store that cannot be reached raises :class:`~rabbitq.effects.StoreUnavailable`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

PENDING_LEASE = 120.0
"""Seconds a debounce key's pending publish is waited for: a publisher killed between
proposing and its confirm holds its burst's latest this long."""

UNIQUE_LEASE = 15.0
"""Seconds a unique key is held pending after its last renewal: its publisher renews it
every third of that while the publish is on its way, so a publisher killed before its
confirm frees its keys this long after, and another publisher's message is sent."""

CONFIRM_WAIT = 60.0
"""Seconds a publish waits at most for a pending holder of its key (a publish's default
confirm timeout): then it raises, nothing sent, rather than name an unconfirmed message."""


@dataclass(frozen=True)
class Held:
    """Who holds a unique key: ``message_id``, ``confirmed`` by the broker or pending."""

    message_id: str
    confirmed: bool


def pending_lease(left: float) -> float:
    """The lease of a pending unique key with ``left`` seconds of its window (pure): the
    lease, never past the window."""
    return max(0.001, min(UNIQUE_LEASE, left))


def poll_waits(first: float = 0.05, cap: float = 0.5) -> Iterator[float]:
    """Seconds between two looks at a pending holder (pure): doubling to ``cap``."""
    wait = first
    while True:
        yield wait
        wait = min(cap, wait * 2)


RUN, SUPERSEDED, WAIT = "run", "superseded", "wait"
"""What a debounced delivery comes to: run it, ack it unrun, or look again shortly."""


class KeyStore(Protocol):
    """The unique and debounce keys of an app (PostgreSQL or Redis)."""

    async def take(self, key: str, message_id: str, lease: float) -> Held | None:
        """Hold ``key`` pending for ``message_id`` for ``lease`` seconds if it is free
        (or its lease or window ended): None; else who holds it (``message_id`` itself,
        published again), confirmed or pending."""

    async def renew(self, key: str, message_id: str, lease: float) -> None:
        """Keep ``key`` pending ``lease`` seconds from now, if ``message_id`` holds it
        pending."""

    async def confirm(self, key: str, message_id: str, seconds: float) -> None:
        """``message_id``'s publish was confirmed: it holds ``key`` confirmed ``seconds``
        from now, if it holds it."""

    async def release(self, key: str, message_id: str) -> None:
        """Free ``key`` if ``message_id`` holds it (pending or confirmed)."""

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
