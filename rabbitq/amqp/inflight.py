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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

# channel -> message_id -> the publish in flight with that id (done when it is settled)
_in_flight: weakref.WeakKeyDictionary[object, dict[str, asyncio.Future[None]]] = (
    weakref.WeakKeyDictionary()
)


@asynccontextmanager
async def one_in_flight(channel: object, message_id: str | None) -> AsyncIterator[None]:
    """Wait until no other publish with ``message_id`` is in flight on ``channel``, then
    hold that place for the block (the publish and its confirm)."""
    if not message_id:  # aiormq gives it a fresh random id
        yield
        return
    pending = _in_flight.setdefault(channel, {})
    while (earlier := pending.get(message_id)) is not None:
        await asyncio.shield(earlier)
    mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    pending[message_id] = mine
    try:
        yield
    finally:
        if pending.get(message_id) is mine:
            del pending[message_id]
        mine.set_result(None)


def held(channel: object) -> int:
    """How many ids have a publish in flight on ``channel`` (for tests)."""
    return len(_in_flight.get(channel, {}))
