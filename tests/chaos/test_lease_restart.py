"""The shared cap when Redis loses its state: a restart without persistence on a
PRIVATE redis-server (tests/redis_node.py), a record deleted, another Redis's record.

What runs at once is counted from the holders' own records (one event loop), never
timed against the machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from rabbitq.ratelimit import RedisRates
from rabbitq.ratelimit.cap import SharedCap
from tests.helpers import REDIS_URL
from tests.redis_node import RedisNode

redis_asyncio = pytest.importorskip("redis.asyncio")


@pytest.fixture
def prefix(redis_prefix: str) -> str:
    """A Redis key prefix of this test's own, as in tests/ratelimit (cleaned after)."""
    return redis_prefix


@pytest.fixture(scope="module")
def node() -> Iterator[RedisNode]:
    with RedisNode.started() as started:
        yield started


@pytest.fixture
async def client() -> AsyncIterator[object]:
    redis = redis_asyncio.Redis.from_url(REDIS_URL)
    yield redis
    await redis.aclose()


@pytest.mark.slow
async def test_a_redis_restart_without_persistence_never_lets_more_than_the_cap_run(
    node: RedisNode,
) -> None:
    """Three worker-like holders of a cap of 2 (lease 3 s, renewed every 1 s); Redis
    killed 0.3 s after two of them run, down 1 s, back empty. The two running handlers
    (3.5 s each) outlive the restart and put their places back; the other two wait."""
    lease, hold = 3.0, 3.5
    rates = [RedisRates(node.url + "?socket_timeout=1", lease=lease) for _ in range(3)]
    caps = [SharedCap(r.places("restart:k", 2), outage_wait=0.2) for r in rates]
    running = peak = 0
    done = 0

    async def job(cap: SharedCap) -> None:
        nonlocal running, peak, done
        await cap.acquire()
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(hold)
        running -= 1
        cap.release()
        done += 1

    jobs = [asyncio.create_task(job(cap)) for cap in (caps[0], caps[1], caps[2], caps[2])]
    # A Redis started less than two heartbeats ago gives no place before two heartbeats
    # after its start.
    async with asyncio.timeout(lease + 5):
        while running < 2:
            await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    await asyncio.to_thread(node.restart, 1.0)
    await asyncio.wait_for(asyncio.gather(*jobs), 30)
    assert done == 4
    assert peak == 2, f"{peak} handlers ran at once with a cap of 2"
    for cap in caps:
        await cap.close()
    for r in rates:
        await r.close()


async def test_a_record_written_by_another_redis_holds_new_places_for_two_heartbeats(
    prefix: str, client
) -> None:
    """As after a failover: held leases renew, no new place is given for two of the
    holders' heartbeats (a third of the 1 s lease each)."""
    rates = RedisRates(REDIS_URL, prefix=prefix, lease=1.0)
    places = rates.places("k", 2)
    assert await places.take("holder")
    await client.hset(places.epoch, "run_id", "another-redis")
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert not await places.take("new")
    assert await places.renew(["holder"]) == 0  # a running handler keeps its place
    assert await places.take("holder")  # and may ask again with its own id
    while not await places.take("new"):
        await asyncio.sleep(0.05)
    assert 0.6 < loop.time() - start < 3.0
    await rates.close()


async def test_a_record_lost_under_a_renewing_holder_holds_new_places_for_two_heartbeats(
    prefix: str, client
) -> None:
    """As after a flush or an eviction: the holder's renewal puts its lease back, and no
    new place is given until two heartbeats later."""
    rates = RedisRates(REDIS_URL, prefix=prefix, lease=1.0)
    places = rates.places("k", 1)
    assert await places.take("holder")
    await client.delete(places.name, places.epoch)
    assert await places.renew(["holder"]) == 0  # put back
    assert await client.zrange(places.name, 0, -1) == [b"holder"]
    await places.release(["holder"])
    assert not await places.take("new")  # room, but Redis may not know every holder yet
    await asyncio.sleep(1.1)
    assert await places.take("new")
    await rates.close()


async def test_the_first_use_of_a_key_on_an_old_redis_waits_for_nothing(prefix: str) -> None:
    rates = RedisRates(REDIS_URL, prefix=prefix, lease=1.0)
    places = rates.places("k", 1)
    assert await places.take("first")
    await rates.close()
