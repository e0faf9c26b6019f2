"""Claims kept alive by a heartbeat: a live worker's keys stay claimed, a dead one's lapse.

A store claims a key for :data:`CLAIM_TTL` (15 s), not for the handler's whole timeout,
and renews every claim its process holds every :data:`HEARTBEAT` (5 s), all of them in
one statement (PostgreSQL) or one script call (Redis) per store. A worker killed with
``kill -9`` stops renewing: its keys are free again at most :data:`CLAIM_TTL` after its
last renewal, instead of the handler's timeout plus 5 s (305 s by default).

A claim is still bounded by its *lease* (the handler's timeout plus 5 s, see
:func:`~rabbitq.effects.store.lease_for`; none for a handler without a timeout): it is
never renewed past it, so a claim that no handler settles lapses then.

The once-only proof does not rest on the heartbeat reaching the store:

* each claim knows until when it is surely held, ``valid_until``: the time its last
  confirmed renewal was *sent* plus the TTL (the store sets the expiry when it receives
  it, later); :func:`held` stops the handler (:class:`~rabbitq.effects.store.LeaseLost`,
  a failed attempt, retried) :data:`LAPSE_MARGIN` before that, so a handler whose
  heartbeat cannot reach the store (the store paused or cut off, the event loop blocked)
  is stopped before another worker can take its key;
* a renewal that finds the claim no longer its own marks it ``lost``: the handler stops;
* the done mark is compare-and-set on the claim's token, and in transactional mode it is
  part of the handler's transaction: a claim that lapsed and was taken over rolls the
  handler's writes back (``LeaseLost``), whatever the heartbeat saw.

What it cannot stop is code that blocks the event loop longer than the TTL (a sync call
in an async handler): the claim may lapse meanwhile, and a plain (not transactional)
effect made in that time may be made again by the worker that took the key over (the
done mark then logs it). Run blocking code in a sync handler (a thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from .store import Claim, LeaseLost, StoreUnavailable

log = logging.getLogger("rabbitq.effects")

HEARTBEAT = 5.0  # seconds between renewals of a process's claims
CLAIM_TTL = 3 * HEARTBEAT  # a claim outlives its last renewal by this much
# A handler is stopped this long before its claim may lapse (no renewal confirmed for
# CLAIM_TTL - LAPSE_MARGIN = 13 s): time for the cancellation to land.
LAPSE_MARGIN = 2.0
LOST_POLL = 1.0  # how often a running handler looks whether a renewal found its claim lost

Renew = Callable[[Sequence[tuple[Claim, float]]], Awaitable[set[str]]]


def first_ttl(lease: float, ttl: float) -> float:
    """A new claim's TTL: ``ttl``, or the lease if shorter (pure)."""
    return min(ttl, lease)


def renewal_ttl(now: float, hold_until: float, ttl: float) -> float:
    """The TTL a renewal sent at ``now`` gives a claim held until ``hold_until`` (its
    lease's end): ``ttl``, never past the lease; 0 or less: do not renew (pure)."""
    return min(ttl, hold_until - now)


def time_left(claims: Sequence[Claim], now: float, margin: float) -> float:
    """Seconds until the handler of ``claims`` must stop: ``margin`` before the first of
    them may lapse; 0 if one is lost or already that close (pure)."""
    if any(c.lost for c in claims):
        return 0.0
    return max(0.0, min(c.valid_until for c in claims) - margin - now)


class Heartbeat:
    """The claims one store holds in this process, renewed every ``every`` seconds by
    ``renew`` (one call for all of them: the claims with their TTLs, answering the tokens
    still held). Its task runs only while claims are held."""

    def __init__(self, renew: Renew, name: str, *, every: float | None = None,
                 ttl: float | None = None) -> None:  # fmt: skip
        self.renew, self.name = renew, name
        self.every = HEARTBEAT if every is None else every
        self.ttl = CLAIM_TTL if ttl is None else ttl
        self._held: dict[str, tuple[Claim, float]] = {}  # token -> (claim, lease's end)
        self._task: asyncio.Task[None] | None = None

    def first_ttl(self, lease: float) -> float:
        """The TTL to claim a key with for ``lease``."""
        return first_ttl(lease, self.ttl)

    def hold(self, claim: Claim, *, sent: float, lease: float) -> None:
        """Keep ``claim`` (taken by a statement sent at loop time ``sent`` with
        :func:`first_ttl` of ``lease``) alive until it is dropped or its lease ends."""
        claim.valid_until = sent + first_ttl(lease, self.ttl)
        self._held[claim.token] = (claim, sent + lease)
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run())  # (a store used on a new loop)

    def drop(self, claim: Claim) -> None:
        """Stop renewing ``claim`` (done, released, or given up)."""
        self._held.pop(claim.token, None)

    async def close(self) -> None:
        task, self._task = self._task, None
        self._held.clear()
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        beat = loop.time()
        while self._held:
            beat += self.every
            await asyncio.sleep(max(0.0, beat - loop.time()))
            beat = max(beat, loop.time() - self.every)  # late (a busy loop): no catch-up burst
            await self.beat(loop.time())

    async def beat(self, sent: float) -> None:
        """One renewal of every claim held, sent at loop time ``sent``."""
        batch = []
        for token, (claim, until) in list(self._held.items()):
            ttl = renewal_ttl(sent, until, self.ttl)
            if ttl > 0:
                batch.append((claim, ttl))
            else:  # its lease is over: it lapses by itself, as without a heartbeat
                del self._held[token]
        if not batch:
            return
        try:
            kept = await self.renew(batch)
        except StoreUnavailable as exc:
            log.warning(
                "%s: could not renew %d claim(s) (%s); their handlers stop before the "
                "claims may lapse",
                self.name,
                len(batch),
                exc,
            )
            return
        for claim, ttl in batch:
            if claim.token in kept:
                claim.valid_until = max(claim.valid_until, sent + ttl)
            elif claim.token in self._held:  # not settled meanwhile: someone else's now
                claim.lost = True
                self.drop(claim)
                log.warning("%s: the claim on key %r lapsed before it was renewed",
                            self.name, claim.key)  # fmt: skip


@contextlib.asynccontextmanager
async def held(claims: Sequence[Claim]) -> AsyncIterator[None]:
    """Run the block while ``claims`` are surely held: if one may lapse (no renewal
    confirmed, see the module docstring) or is lost, the block is cancelled and
    :class:`~rabbitq.effects.store.LeaseLost` raised. Claims without a heartbeat
    (``valid_until`` infinite) need no watch."""
    if all(math.isinf(c.valid_until) and not c.lost for c in claims):
        yield
        return
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    lapsed = False

    async def watch() -> None:
        nonlocal lapsed
        while (left := time_left(claims, loop.time(), LAPSE_MARGIN)) > 0:
            await asyncio.sleep(min(left, LOST_POLL))
        lapsed = True
        task.cancel()

    watcher = loop.create_task(watch())
    try:
        yield
    except asyncio.CancelledError:
        if lapsed and task.uncancel() == 0:
            keys = ", ".join(repr(c.key) for c in claims[:3])
            raise LeaseLost(
                f"the claim on key {keys} could not be renewed in time (the idempotency "
                "store unreachable?); the handler was stopped before it could lapse"
            ) from None
        raise
    else:
        if lapsed:  # it fired as the block returned: absorb its cancellation
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                task.uncancel()
    finally:
        watcher.cancel()
