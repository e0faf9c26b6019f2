"""The concurrency cap shared in Redis (leases), against the real Redis on 127.0.0.1:6379.

Each test uses its own key prefix and deletes its keys. What runs at once is counted
from the holders' own records, never timed against the machine.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

import pytest

from rabbitq.errors import ConfigurationError
from rabbitq.ratelimit import LocalRates, RedisRates
from rabbitq.ratelimit.cap import SharedCap, Unreachable
from rabbitq.ratelimit.gate import Gate
from rabbitq.ratelimit.lease import RedisPlaces
from tests.helpers import REDIS_URL

redis_asyncio = pytest.importorskip("redis.asyncio")


@pytest.fixture
async def client() -> AsyncIterator[object]:
    redis = redis_asyncio.Redis.from_url(REDIS_URL)
    yield redis
    await redis.aclose()


async def test_places_are_taken_up_to_the_limit_and_released(prefix: str, client) -> None:
    rates = RedisRates(REDIS_URL, prefix=prefix)
    places = rates.places("emails:send", 2)
    assert places.name == prefix + "emails:send:running"
    assert await places.take("a") and await places.take("b")
    assert not await places.take("c")  # full
    assert await places.take("a")  # already held: extended, not a second place
    assert await client.zcard(places.name) == 2
    await places.release(["a"])
    assert await places.take("c") and not await places.take("d")
    await places.release(["b", "c", "never-held"])
    assert not await client.exists(places.name)  # an empty cap leaves no key
    await rates.close()


async def test_an_expired_lease_is_dropped_by_the_next_take(prefix: str, client) -> None:
    rates = RedisRates(REDIS_URL, prefix=prefix, lease=1.5)  # more than a few round trips
    places = rates.places("k", 1)
    assert await places.take("dead-holder")
    assert 0 < await client.pttl(places.name) <= 2500  # the key goes a second after its lease
    assert not await places.take("other")
    await asyncio.sleep(1.6)  # the holder never renewed
    assert await places.take("other")
    assert await client.zrange(places.name, 0, -1) == [b"other"]
    await rates.close()


async def test_a_renewed_lease_outlives_its_length(prefix: str) -> None:
    rates = RedisRates(REDIS_URL, prefix=prefix, lease=0.5)
    places = rates.places("k", 1)
    assert await places.take("holder")
    for _ in range(10):  # 1 s, twice the lease (slack for a busy machine: 0.4 s a step)
        await asyncio.sleep(0.1)
        assert await places.renew(["holder"]) == 0
        assert not await places.take("other")
    await places.release(["holder"])
    assert await places.take("other")
    await rates.close()


async def test_a_lease_that_expired_is_taken_back_only_if_there_is_room(prefix: str) -> None:
    # A lease of 1 s: the steps between two sleeps (a few round trips) stay well inside it.
    rates = RedisRates(REDIS_URL, prefix=prefix, lease=1.0)
    places = rates.places("k", 1)
    assert await places.take("slow")
    await asyncio.sleep(1.1)  # its renewals could not reach Redis for a whole lease
    assert await places.renew(["slow"]) == 0  # still there (nobody took since): extended
    await asyncio.sleep(1.1)
    assert await places.take("other")  # now dropped, and its place taken
    assert await places.renew(["slow"]) == 1  # lost: no room to take it back
    assert await places.renew(["other"]) == 0
    await places.release(["other"])
    assert await places.renew(["slow"]) == 0  # room again: taken back
    assert not await places.take("third")
    await rates.close()


def test_a_lease_must_be_a_positive_time() -> None:
    for lease in (0, -1, 0.01, True, "30"):
        with pytest.raises(ConfigurationError):
            RedisRates(REDIS_URL, lease=lease)  # type: ignore[arg-type]


async def test_two_caps_sharing_redis_never_run_more_than_the_limit(prefix: str) -> None:
    """Two caps (as two processes would have) of 2, each with 10 jobs of its own."""
    rates = [RedisRates(REDIS_URL, prefix=prefix) for _ in range(2)]
    caps = [SharedCap(r.places("k", 2)) for r in rates]
    running = peak = 0
    done: list[tuple[int, int]] = []

    async def job(side: int, n: int) -> None:
        nonlocal running, peak
        await caps[side].acquire()
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        caps[side].release()
        done.append((side, n))

    await asyncio.gather(*(job(side, n) for side in (0, 1) for n in range(10)))
    assert peak == 2 and len(done) == 20
    assert {side for side, _ in done} == {0, 1}
    for cap in caps:
        # One waiter per process asks: a few asks per job, not one per waiter per poll.
        assert cap.asks < 10 * 25, cap.asks
        await cap.close()
        assert cap.in_use == 0 and cap.held == []
    for r in rates:
        await r.close()
    client = redis_asyncio.Redis.from_url(REDIS_URL)
    assert not await client.exists(prefix + "k:running")  # every place given back
    await client.aclose()


async def test_the_local_cap_stays_in_front(prefix: str) -> None:
    rates = RedisRates(REDIS_URL, prefix=prefix)
    cap = SharedCap(rates.places("k", 1))
    await cap.acquire()
    second = asyncio.create_task(cap.acquire())
    await asyncio.sleep(0.1)
    asks = cap.asks
    assert not second.done() and asks == 1  # waits here without asking Redis
    cap.release()
    await second
    cap.release()
    await cap.close()
    await rates.close()


async def test_a_held_place_is_renewed_while_it_runs(prefix: str) -> None:
    rates = RedisRates(REDIS_URL, prefix=prefix, lease=0.6)  # renewed every 0.2 s
    cap = SharedCap(rates.places("k", 1))
    other = rates.places("k", 1)
    await cap.acquire()
    for _ in range(15):  # 1.5 s: more than twice the lease
        await asyncio.sleep(0.1)
        assert not await other.take("intruder")
    cap.release()
    await cap.close()
    assert await other.take("intruder")
    await rates.close()


class _LostReply:
    """Places whose first take runs in Redis but whose reply is lost."""

    def __init__(self, places: RedisPlaces) -> None:
        self.inner = places
        self.limit, self.lease, self.lost = places.limit, places.lease, 0

    async def take(self, lease_id: str) -> bool:
        held = await self.inner.take(lease_id)
        if not self.lost:
            self.lost += 1
            raise Unreachable("connection reset by peer")
        return held

    async def renew(self, lease_ids: Sequence[str]) -> int:
        return await self.inner.renew(lease_ids)

    async def release(self, lease_ids: Sequence[str]) -> None:
        await self.inner.release(lease_ids)


async def test_a_take_whose_reply_is_lost_does_not_take_two_places(
    prefix: str, client, caplog: pytest.LogCaptureFixture
) -> None:
    rates = RedisRates(REDIS_URL, prefix=prefix)
    places = rates.places("k", 2)
    cap = SharedCap(_LostReply(places))
    with caplog.at_level(logging.WARNING, "rabbitq.ratelimit"):
        await cap.acquire()  # asked again with the same lease id, which it already holds
    assert cap.asks == 2 and await client.zcard(places.name) == 1
    assert "cannot be reached" in caplog.text and "reached again" in caplog.text
    cap.release()
    await cap.close()
    assert not await client.exists(places.name)
    await rates.close()


async def test_a_delivery_waits_while_redis_cannot_be_reached() -> None:
    rates = RedisRates("redis://127.0.0.1:1/0")
    cap = SharedCap(rates.places("k", 1), outage_wait=0.05)
    waiter = asyncio.create_task(cap.acquire())
    await asyncio.sleep(0.5)
    assert not waiter.done()  # neither run without its place nor failed
    assert cap.asks >= 3
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert cap.in_use == 0
    await cap.close()
    await rates.close()


async def test_the_gate_uses_a_shared_cap_only_with_a_shared_limiter(prefix: str) -> None:
    rates = RedisRates(REDIS_URL, prefix=prefix)
    shared = Gate("q:t", rate=None, backend=rates, concurrency=2)
    local = Gate("q:t", rate=None, backend=LocalRates(), concurrency=2)
    assert isinstance(shared.cap, SharedCap) and shared.cap.places.name == prefix + "q:t:running"
    assert local.cap is not None and not isinstance(local.cap, SharedCap)
    await shared.enter()
    assert shared.running == 1 and shared.cap.held
    shared.leave()
    await shared.close()
    await local.close()
    await rates.close()
