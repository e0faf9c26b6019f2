"""Starting something that a stop request may overtake (a worker still connecting)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


async def unless_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run ``work`` to its end (True; its error is raised), unless ``stop`` is set first:
    then ``work`` is cancelled and awaited, and the answer is False.

    A signal must stop a worker in every state, connecting and reconnecting included:
    this is what lets SIGTERM end a worker whose first connection does not answer.
    """
    working = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({working, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if working.done():
        working.result()
        return True
    working.cancel()
    await asyncio.gather(working, return_exceptions=True)
    return False
