"""SharedCap's bookkeeping with places kept in memory (no Redis): the paths that a
real Redis rarely takes on cue (failed renewals and releases, a release that races a
renewal). The same class against the real Redis: tests/ratelimit/test_lease.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from rabbitq.ratelimit.cap import SharedCap, Unreachable
from tests.helpers import wait_for


class _Memory:
    """Places in memory, like the Lua scripts but without expiry; ``down`` makes every
    call fail as an unreachable Redis does; ``hold_renewal`` pauses renewals."""

    def __init__(self, limit: int, lease: float = 0.3) -> None:
        self.limit, self.lease = limit, lease
        self.leases: set[str] = set()
        self.down = False
        self.renewals = 0
        self.hold_renewal: asyncio.Event | None = None

    def _reach(self) -> None:
        if self.down:
            raise Unreachable("connection refused")

    async def take(self, lease_id: str) -> bool:
        self._reach()
        if lease_id in self.leases or len(self.leases) < self.limit:
            self.leases.add(lease_id)
            return True
        return False

    async def renew(self, lease_ids: Sequence[str]) -> int:
        self._reach()
        if self.hold_renewal is not None:
            await self.hold_renewal.wait()
        self.renewals += 1
        lost = 0
        for lease in lease_ids:  # gone ones are taken back if there is room
            if lease not in self.leases and len(self.leases) >= self.limit:
                lost += 1
            else:
                self.leases.add(lease)
        return lost

    async def release(self, lease_ids: Sequence[str]) -> None:
        self._reach()
        self.leases.difference_update(lease_ids)


async def test_failed_renewals_and_releases_never_reach_the_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    places = _Memory(1)
    cap = SharedCap(places)
    await cap.acquire()
    places.down = True
    with caplog.at_level(logging.WARNING, "rabbitq.ratelimit"):
        await asyncio.sleep(0.25)  # two renewals fail
        cap.release()  # the handler ended: no exception, whatever Redis does
        await cap.close()
    assert cap.in_use == 0 and cap.held == []
    assert places.leases  # still in "Redis": it would expire there
    assert "not renewed" in caplog.text and "could not release 1 place" in caplog.text


async def test_a_release_that_races_a_renewal_is_made_again() -> None:
    places = _Memory(1)
    cap = SharedCap(places)
    await cap.acquire()
    places.hold_renewal = asyncio.Event()
    await asyncio.sleep(0.15)  # the renewal has started and waits
    cap.release()  # released meanwhile: the paused renewal then takes it back
    await asyncio.sleep(0.01)
    assert places.leases == set()
    places.hold_renewal.set()
    await asyncio.sleep(0.01)
    assert places.renewals == 1
    await cap.close()
    assert places.leases == set()  # released a second time after the renewal


async def test_renewals_run_only_while_places_are_held() -> None:
    places = _Memory(2, lease=0.15)  # a renewal every 0.05 s
    cap = SharedCap(places)
    await cap.acquire()
    await wait_for(lambda: places.renewals >= 2, timeout=10, interval=0.01)
    cap.release()
    await asyncio.sleep(0.1)
    idle = places.renewals
    await asyncio.sleep(0.2)
    assert places.renewals == idle  # nothing held: nothing renewed
    await cap.acquire()
    await wait_for(lambda: places.renewals > idle, timeout=10, interval=0.01)  # renewing again
    cap.release()
    await cap.close()


async def test_a_waiter_backs_off_while_the_cap_is_full() -> None:
    places = _Memory(1)
    holder, waiter = SharedCap(places), SharedCap(places)
    await holder.acquire()
    waiting = asyncio.create_task(waiter.acquire())
    await asyncio.sleep(1.0)
    # 5 ms doubling to 100 ms with jitter: about 10 to 20 asks in the second, not 200.
    assert 5 <= waiter.asks <= 30, waiter.asks
    holder.release()
    await asyncio.wait_for(waiting, 1.0)
    waiter.release()
    await holder.close()
    await waiter.close()
    assert places.leases == set()
