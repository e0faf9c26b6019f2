"""Limits kept in this process: a rate per key (GCRA) and a concurrency cap.

:class:`LocalRates` is the default backend of ``@app.handler(..., rate_limit=...)``: each
worker process keeps its own budget, so ``--processes 4`` with ``"14/s"`` starts up to
56 a second. Give :class:`~rabbitq.ratelimit.RedisRates` to share one budget.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..errors import ConfigurationError
from .rate import Rate, check


class LocalRates:
    """Rate budgets held in this process's memory, one per key."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tats: dict[str, float] = {}

    async def acquire(self, key: str, rate: Rate) -> float:
        """Start a call of ``key`` now (0.0), or say how many seconds until asking again."""
        decision = check(self._tats.get(key), self._clock(), rate)
        self._tats[key] = decision.tat
        return decision.wait

    async def close(self) -> None:
        """Nothing to release (the same interface as the shared backends)."""


class ConcurrencyCap:
    """At most ``limit`` holders at once in this process; the others wait in order."""

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigurationError(f"concurrency must be a positive integer, not {limit!r}")
        self.limit = limit
        self._semaphore = asyncio.Semaphore(limit)
        self.in_use = 0

    async def acquire(self) -> None:
        """Wait for a free place and take it."""
        await self._semaphore.acquire()
        self.in_use += 1

    def release(self) -> None:
        """Give a place back."""
        self.in_use -= 1
        self._semaphore.release()
