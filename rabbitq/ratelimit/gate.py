"""The gate in front of one limited handler: a concurrency cap, then a rate slot.

The cap is per process (:class:`ConcurrencyCap`) unless the limiter can hold places
for every process (:class:`~rabbitq.ratelimit.cap.SharedPlaces`, i.e. ``RedisRates``):
then it is a :class:`~rabbitq.ratelimit.cap.SharedCap` of leases in Redis under
``"<key>:running"``, with the local cap still in front.

The worker calls :meth:`Gate.enter` before the handler runs and :meth:`Gate.leave`
after; ``enter`` returns the seconds it waited (for ``rabbitq_limit_wait_seconds``).
The cap is taken first, so a rate slot is never spent by a call that then waits
for a place; the rate is asked for by one waiter at a time, which sleeps for as long
as the backend says and asks again, so a busy process asks about once per start.
A delivery waiting here is not running: it uses none of the worker's handler slots,
and nothing about it is retried or dead-lettered.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from .cap import SharedCap, SharedPlaces
from .local import ConcurrencyCap
from .rate import Rate


class RateBackend(Protocol):
    """Where rate budgets live: :class:`LocalRates` or :class:`RedisRates`."""

    async def acquire(self, key: str, rate: Rate) -> float:
        """Start a call of ``key`` now (0.0), or say how many seconds until asking again."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Limit:
    """A handler's limits as configured: the pure data the App keeps."""

    rate: Rate | None = None
    concurrency: int | None = None
    backend: RateBackend | None = None  # None: LocalRates of the worker
    key: str = ""  # the budget's name; default: "<queue>:<type>"


class Gate:
    """One handler's limits at run time (one per handler per worker)."""

    def __init__(
        self,
        key: str,
        *,
        rate: Rate | None,
        backend: RateBackend,
        concurrency: int | None,
    ) -> None:
        self.key = key
        self.rate = rate
        self.backend = backend
        self.cap: ConcurrencyCap | SharedCap | None = None
        if concurrency is not None:
            self.cap = ConcurrencyCap(concurrency)  # checks the number
            if isinstance(backend, SharedPlaces):
                self.cap = SharedCap(backend.places(key, concurrency))
        self.running = 0  # handlers past the gate now
        self.waiting = 0  # deliveries waiting in the gate now
        # One waiter at a time asks the backend, in arrival order (asyncio.Lock is fair).
        self._asking = asyncio.Lock()

    async def enter(self) -> float:
        """Wait for a place and a rate slot; return the seconds waited."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        self.waiting += 1
        try:
            if self.cap is not None:
                await self.cap.acquire()
            try:
                if self.rate is not None:
                    async with self._asking:
                        while wait := await self.backend.acquire(self.key, self.rate):
                            await asyncio.sleep(wait)
            except BaseException:
                if self.cap is not None:
                    self.cap.release()
                raise
        finally:
            self.waiting -= 1
        self.running += 1
        return loop.time() - started

    def leave(self) -> None:
        """The handler ended, however it ended."""
        self.running -= 1
        if self.cap is not None:
            self.cap.release()

    async def close(self) -> None:
        """Stop renewing a shared cap's leases and finish its releases."""
        if isinstance(self.cap, SharedCap):
            await self.cap.close()
