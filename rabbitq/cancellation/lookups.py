"""The arrival lookups of the ``cancelled`` stage, coalesced across a short window.

Every delivery asks whether its message was cancelled. Asked one event-loop turn at a
time, a busy worker sent a round trip per few deliveries (4.9 ids per ``MGET`` in the
cancel bench), and the store client's own work per round trip (a connection out of the
pool and back, the command packed and parsed) cost more than the rest of the delivery.
A :class:`Lookups` waits instead: the first id starts a window of :data:`WINDOW`
seconds, and every id asked within it goes in one ``which(ids)``: one ``MGET``, one
``SELECT``. A window that ends while the last call is still in flight stays open until
that call returns (one call in flight: under load a batch grows to what arrived during
a round trip); :data:`MAX_IDS` waiting ids end it at once.

Each answer is read from the store after its delivery arrived, as before: the window
delays the read, it never reuses an older one, so a cancel written before a message
arrives is always seen. A store that fails fails every waiter of that call with its
error (each message is held, as a single failed lookup held it); a flush cancelled
(the loop is closing) fails them with :class:`LookupCancelled`. A waiter that gave up
(its delivery task was cancelled) is left out of the call.

:func:`answers` is the pure part: each waiter's answer from the set the store found.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence

WINDOW = 0.002
"""Seconds the first lookup of a window waits for others to join its call."""
MAX_IDS = 256
"""Ids that end a window at once (a worker's default prefetch): one call's size."""

Which = Callable[[Sequence[str]], Awaitable[Collection[str]]]


class LookupCancelled(Exception):
    """The store call carrying this lookup was cancelled (the event loop is closing)."""


def answers(ids: Sequence[str], found: Collection[str]) -> list[bool]:
    """Whether each of ``ids`` was cancelled, given the ids the store ``found`` (pure)."""
    return [mid in found for mid in ids]


class Lookups:
    """``await lookups.ask(message_id)``: whether it was cancelled, read by ``which``
    together with the other ids asked within the same window (module docstring)."""

    def __init__(self, which: Which, *, window: float = WINDOW, max_ids: int = MAX_IDS) -> None:
        if window < 0 or max_ids < 1:
            raise ValueError(f"Lookups needs window >= 0 and max_ids >= 1, not {window}, {max_ids}")
        self.which = which
        self.window = window
        self.max_ids = max_ids
        self.calls = 0  # store calls made (for the tests and the bench)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ids: list[str] = []
        self._waiters: list[asyncio.Future[bool]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flights: set[asyncio.Task[None]] = set()
        self._due = False  # a window ended while a call was in flight

    def ask(self, message_id: str) -> asyncio.Future[bool]:
        """A future of whether ``message_id`` was cancelled (or of the store's error)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or a new loop (the old one's state is void)
            self._loop, self._ids, self._waiters, self._timer = loop, [], [], None
            self._flights, self._due = set(), False
        future: asyncio.Future[bool] = loop.create_future()
        self._ids.append(message_id)
        self._waiters.append(future)
        if len(self._ids) >= self.max_ids:
            self.flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.window, self.flush)
        return future

    def flush(self, *, now: bool = False) -> None:
        """The window's end: send what waits, in one store call, unless a call is still
        in flight (then when it returns: what waits keeps joining meanwhile), or
        ``now``, or :attr:`max_ids` wait."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._ids or self._loop is None:
            return
        if self._flights and not now and len(self._ids) < self.max_ids:
            self._due = True
            return
        self._due = False
        ids, waiters, self._ids, self._waiters = self._ids, self._waiters, [], []
        task = self._loop.create_task(self._call(ids, waiters))
        self._flights.add(task)
        task.add_done_callback(self._landed)

    def _landed(self, task: asyncio.Task[None]) -> None:
        self._flights.discard(task)
        if self._due and task.get_loop() is self._loop:
            self.flush()

    async def drain(self) -> None:
        """Send what waits and wait for every call in flight (before the store closes)."""
        if self._loop is not asyncio.get_running_loop():
            return
        self.flush(now=True)
        while self._flights:
            await asyncio.wait(set(self._flights))

    async def _call(self, ids: list[str], waiters: list[asyncio.Future[bool]]) -> None:
        asked = [mid for mid, w in zip(ids, waiters, strict=True) if not w.done()]
        if not asked:
            return
        self.calls += 1
        try:
            found = await self.which(list(dict.fromkeys(asked)))  # a redelivered id once
        except Exception as exc:
            _fail(waiters, exc)
            return
        except BaseException:
            _fail(waiters, LookupCancelled("the cancellations lookup was cancelled"))
            raise
        for waiter, cancelled in zip(waiters, answers(ids, found), strict=True):
            if not waiter.done():
                waiter.set_result(cancelled)


def _fail(waiters: Sequence[asyncio.Future[bool]], error: Exception) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_exception(error)
