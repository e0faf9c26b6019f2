"""A concurrency cap shared by every process that uses the same backend (Redis).

:class:`SharedCap` is what a :class:`~rabbitq.ratelimit.Gate` uses for ``concurrency=N``
when the handler's limiter can hold places for several processes (``RedisRates``; see
:mod:`rabbitq.ratelimit.lease`). In one process:

- the local :class:`~rabbitq.ratelimit.ConcurrencyCap` of N stays in front, so this
  process never holds more than N and never asks for more;
- one waiter at a time asks the backend for a place (in arrival order), sleeping a
  short, growing, bounded while (``first_wait`` to ``max_wait``, with jitter) between
  asks, so a full cap costs each process a few small requests a second;
- a place is a lease that expires unless renewed: one task per cap renews every lease
  this process holds, in one request, every heartbeat (:func:`renew_period`: a third of
  the lease, at most 2 s, so that a restarted Redis learns its holders back quickly);
- :meth:`SharedCap.release` gives the local place back at once and the lease in a task
  of its own, so a handler's end never waits on Redis; a release that fails is logged,
  and the lease expires.

A backend that cannot be reached while a delivery waits (:class:`Unreachable`) is asked
again, backing off up to ``outage_wait``: the delivery keeps waiting, it is not
retried, dead-lettered or run without its place. A renewal that fails leaves the
handler running (it never stops half-way); if Redis stays away for a whole lease, its
place may be taken by another process meanwhile (more than N for a while), and the
lease is taken back when there is room again. Both are logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import uuid
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .local import ConcurrencyCap

log = logging.getLogger("rabbitq.ratelimit")


RENEW_MAX = 2.0  # the longest heartbeat of a holder's renewals, seconds


def renew_period(lease: float) -> float:
    """Seconds between a holder's renewals of its leases of ``lease`` seconds (pure)."""
    return min(lease / 3, RENEW_MAX)


class Unreachable(Exception):
    """The shared backend could not be reached (the request may or may not have run)."""


class Places(Protocol):
    """The ``limit`` places of one key, held as leases of ``lease`` seconds."""

    limit: int
    lease: float

    async def take(self, lease_id: str) -> bool:
        """Hold a place under ``lease_id`` if one is free (extend it if already held)."""
        ...

    async def renew(self, lease_ids: Sequence[str]) -> int:
        """Extend these leases; return how many are lost (expired, no room to retake)."""
        ...

    async def release(self, lease_ids: Sequence[str]) -> None:
        """Give these places back."""
        ...


@runtime_checkable
class SharedPlaces(Protocol):
    """A limiter that can also hold concurrency places for every process (RedisRates)."""

    def places(self, key: str, limit: int) -> Places:
        """The ``limit`` places of ``key``."""
        ...


def new_lease_id() -> str:
    """A lease id that says who holds it: host, process, then a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


class SharedCap:
    """At most ``places.limit`` holders at once across every process that shares them."""

    def __init__(
        self,
        places: Places,
        *,
        first_wait: float = 0.005,
        max_wait: float = 0.1,
        outage_wait: float = 1.0,
    ) -> None:
        self.places = places
        self.limit = places.limit
        self.first_wait = first_wait
        self.max_wait = max_wait
        self.outage_wait = outage_wait
        self.asks = 0  # requests to take a place (for tests and curiosity)
        self._local = ConcurrencyCap(places.limit)
        self._asking = asyncio.Lock()  # one waiter per process asks, in arrival order
        self.held: list[str] = []  # this process's leases
        self._renewing: asyncio.Task[None] | None = None
        self._releasing: set[asyncio.Task[None]] = set()
        self._down = False  # the backend could not be reached the last time we asked

    @property
    def in_use(self) -> int:
        """Places this process holds or is about to hold."""
        return self._local.in_use

    async def acquire(self) -> None:
        """Wait for a place here and a lease in the backend, and take both."""
        await self._local.acquire()
        lease_id = new_lease_id()
        asked = False
        try:
            async with self._asking:
                asked = True
                await self._take(lease_id)
        except BaseException:
            self._local.release()
            if asked:  # a take may have run in Redis even though its reply never came
                self._release_later([lease_id])
            raise
        self.held.append(lease_id)
        if self._renewing is None or self._renewing.done():
            self._renewing = asyncio.create_task(self._renew_while_held())

    def release(self) -> None:
        """Give a place back (any lease will do: places are alike)."""
        lease_id = self.held.pop()
        self._local.release()
        self._release_later([lease_id])

    async def close(self) -> None:
        """Stop renewing and wait for the releases in flight (a few seconds at most)."""
        if self._renewing is not None:
            self._renewing.cancel()
            await asyncio.gather(self._renewing, return_exceptions=True)
        if self._releasing:
            await asyncio.wait(set(self._releasing), timeout=5.0)

    async def _take(self, lease_id: str) -> None:
        wait = self.first_wait
        outage = self.first_wait
        while True:
            self.asks += 1
            try:
                if await self.places.take(lease_id):
                    self._reachable()
                    return
            except Unreachable as exc:
                self._unreachable("a delivery waits for its place", exc)
                await asyncio.sleep(outage)
                outage = min(outage * 2, self.outage_wait)
                continue
            self._reachable()
            await asyncio.sleep(wait * random.uniform(0.5, 1.0))
            wait = min(wait * 2, self.max_wait)

    async def _renew_while_held(self) -> None:
        period = renew_period(self.places.lease)
        while self.held:
            await asyncio.sleep(period)
            held = list(self.held)
            if not held:
                return
            try:
                lost = await self.places.renew(held)
            except Unreachable as exc:
                self._unreachable("running handlers' places are not renewed", exc)
                continue
            self._reachable()
            # A lease released while the renewal ran may have been taken again.
            gone = [lease for lease in held if lease not in self.held]
            self._release_later(gone)
            if lost:
                log.warning(
                    "%d place(s) of %s had expired and are taken: more than %d may run "
                    "at once until they end",
                    lost,
                    getattr(self.places, "name", "a shared cap"),
                    self.limit,
                )

    def _release_later(self, lease_ids: list[str]) -> None:
        if lease_ids:
            task = asyncio.create_task(self._release(lease_ids))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)

    async def _release(self, lease_ids: list[str]) -> None:
        try:
            await self.places.release(lease_ids)
        except Exception as exc:  # the lease expires on its own
            log.warning(
                "could not release %d place(s) (%s): they come back when their lease "
                "expires, within %gs",
                len(lease_ids),
                exc,
                self.places.lease,
            )

    def _unreachable(self, what: str, exc: Exception) -> None:
        if not self._down:
            self._down = True
            log.warning("the shared concurrency cap cannot be reached (%s): %s", exc, what)

    def _reachable(self) -> None:
        if self._down:
            self._down = False
            log.warning("the shared concurrency cap can be reached again")
