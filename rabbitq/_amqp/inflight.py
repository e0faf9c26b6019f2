"""At most one publish per ``message_id`` in flight on a channel.

aiormq matches a returned message (``basic.return``: mandatory and unroutable) to its
pending publish by ``message_id``, not by delivery tag: with two publishes of one id in
flight on a channel, the return of one is charged to the other, and the unroutable one
is then "confirmed" by the broker's ack that follows its return (issue 11: 27 of 100
classic and 44 of 100 quorum messages lost with a retry queue deleted). Two publishes
with one id are ordinary: a producer that retries, a derived id, a replay.

rabbitq does not rely on the id being unique: every publish it makes goes through
:func:`one_in_flight`, which holds a publish until the one before it with the same id
on the same channel has its confirm or return. Then the only pending publish an id can
name is its own, and aiormq's match is exact. Publishes with different ids (nearly
all of them) are never held.
"""

from __future__ import annotations

import asyncio
import weakref
from types import TracebackType

# channel -> message_id -> the publishes waiting for the one in flight with that id
_in_flight: weakref.WeakKeyDictionary[object, dict[str, list[asyncio.Future[None]]]] = (
    weakref.WeakKeyDictionary()
)


class _Place:
    """The place of one publish among those with its id on its channel (see
    :func:`one_in_flight`). A class rather than a generator-based context manager: it is
    on the path of every publish, and takes no future unless it has to wait."""

    __slots__ = ("_id", "_pending", "_waiters")

    def __init__(self, channel: object, message_id: str | None) -> None:
        self._id = message_id
        self._waiters: list[asyncio.Future[None]] = []
        pending = _in_flight.get(channel)
        if pending is None and message_id:
            pending = _in_flight[channel] = {}
        self._pending = pending

    async def __aenter__(self) -> None:
        if not self._id or self._pending is None:  # aiormq gives it a fresh random id
            return
        while (waiting := self._pending.get(self._id)) is not None:
            woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            waiting.append(woken)
            await woken  # the earlier publish settled: look again
        self._pending[self._id] = self._waiters

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._id or self._pending is None:
            return
        if self._pending.get(self._id) is self._waiters:
            del self._pending[self._id]
        for woken in self._waiters:
            if not woken.done():  # (its publish may have been cancelled meanwhile)
                woken.set_result(None)


def one_in_flight(channel: object, message_id: str | None) -> _Place:
    """Wait (``async with``) until no other publish with ``message_id`` is in flight on
    ``channel``, then hold that place for the block (the publish and its confirm)."""
    return _Place(channel, message_id)


def held(channel: object) -> int:
    """How many ids have a publish in flight on ``channel`` (for tests)."""
    return len(_in_flight.get(channel, {}))
