"""Where a chord is counted and results are kept: the :class:`ChordStore` protocol, and
the one place an app's status store becomes one (:func:`chord_store`).

A chord's state is three things, all in the app's status database:

- its **members done**, a set of indexes (each with the member's ``message_id``): marking
  index ``i`` twice is marking it once, so duplicates and retries never count twice;
  ``mark`` adds and answers how many there are, atomically;
- a **claim** per message it sends (``then``, ``failure``): absent, ``busy`` (held by a
  delivery's token, ``<member index>/<nonce>``, until a lease ends) or ``sent``; and one
  per member's run (``run:<index>``, when its handler has no idempotency store);
- its **shape** (what the id names: :func:`~.wire.shape`), recorded at publish;
- the **results** of handlers, by ``message_id``.

A store that cannot be reached raises :class:`~rabbitq.effects.StoreUnavailable`: the
member's attempt fails and is retried; nothing is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..effects.location import PostgresLocation, RedisLocation
from ..errors import ConfigurationError

__all__ = ["ChordStore", "chord_store"]


class ChordStore(Protocol):
    """The chord counts, callback claims and results (PostgreSQL or Redis)."""

    async def put_result(self, message_id: str, result: bytes) -> None:
        """Keep a handler's result (JSON) for ``message_id``; a later one replaces it."""

    async def result(self, message_id: str) -> Any:
        """The result kept for ``message_id`` (decoded), or None."""

    async def mark(self, group_id: str, index: int, message_id: str) -> int:
        """Add member ``index`` to the chord's members done; return how many are done."""

    async def results(self, group_id: str) -> Sequence[tuple[int, str, Any]]:
        """``(index, message_id, result)`` of every member done, by index."""

    async def register(self, group_id: str, shape: str) -> str:
        """Record that ``group_id`` names the workflow ``shape`` (:func:`~.wire.shape`)
        unless it names one already; return the shape it names (``shape`` if new)."""

    async def claim(self, group_id: str, kind: str, token: str, lease: float) -> str:
        """:data:`~.wire.NEW` (``token`` holds it now: it was free, expired or
        its own), :data:`~.wire.SENT`, :data:`~.wire.OTHER` or :data:`~.wire.SAME` (held
        by a token of the same member index)."""

    async def release(self, group_id: str, kind: str, token: str) -> None:
        """Give the claim up if ``token`` still holds it (its send failed)."""

    async def sent(self, group_id: str, kind: str) -> None:
        """Record that the ``kind`` message of the chord was confirmed by the broker."""

    async def close(self) -> None:
        """Close the connections (opened again on next use)."""


def chord_store(status: Any) -> ChordStore | None:
    """The chord store beside ``status`` (an app's status store): the store at its
    ``location`` (:mod:`rabbitq.effects.location`: the same database, prefix, retention
    and timeout); None for a store without one (of another kind)."""
    location = getattr(status, "location", None)
    if isinstance(location, PostgresLocation):
        from .chords_pg import PostgresChords

        return PostgresChords(
            location.dsn,
            prefix=location.prefix,
            retention=location.retention,
            timeout=location.timeout,
        )
    if isinstance(location, RedisLocation):
        from .chords_redis import RedisChords

        return RedisChords(
            location.url,
            key_prefix=location.chord_prefix,  # rabbitq:wf:
            retention=location.retention,
            timeout=location.timeout,
        )
    return None


async def read_result(app: object, status: Any, message_id: str) -> Any:
    """:meth:`rabbitq.App.result`: what ``message_id``'s handler returned, read from the
    chord store beside ``status`` (the app's status writer, or None)."""
    store = chord_store(status.store) if status is not None else None
    if store is None:
        raise ConfigurationError(f"{app!r} has no PostgreSQL or Redis status store")
    try:
        return await store.result(message_id)
    finally:
        await store.close()
