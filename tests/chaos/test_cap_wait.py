"""How long the shared concurrency cap starts nothing on a fresh Redis and after a Redis
restart (issue #33, item 4), on PRIVATE redis-servers (tests/redis_node.py), with the
default lease (30 s).

A Redis restarted without persistence cannot be told from a new one: either may have
holders whose places it forgot. No new place is given until the holders' renewals
(every ``min(lease / 3, 2 s)``) have had two heartbeats to put theirs back, counted from
Redis's start: a Redis older than that gives places at once. What runs at once is
counted from the holders' own records (one event loop), never more than the cap.
Times printed (``-s``).
"""

from __future__ import annotations

import asyncio

import pytest

from rabbitq.ratelimit import RedisRates
from rabbitq.ratelimit.cap import SharedCap
from tests.redis_node import RedisNode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# Generous for a loaded machine; the old wait was a whole lease (30 s).
BOUND = 15.0


async def test_a_fresh_redis_starts_capped_handlers_within_seconds() -> None:
    with RedisNode.started() as node:
        loop = asyncio.get_running_loop()
        started = loop.time()
        rates = RedisRates(node.url)
        cap = SharedCap(rates.places("fresh:k", 2))
        try:
            await asyncio.wait_for(cap.acquire(), BOUND)
            waited = loop.time() - started
            print(f"\nfresh Redis: the first capped start after {waited:.1f} s")
            cap.release()
        finally:
            await cap.close()
            await rates.close()


async def test_a_restarted_redis_starts_new_handlers_within_seconds_and_never_over_the_cap(
) -> None:  # fmt: skip
    """Three holders of a cap of 2, six jobs; Redis killed while two run, down 1 s, back
    empty. The first job ends while Redis is down, the second (12 s) puts its place
    back; the next start comes when the fence lifts, seconds after the restart (the
    place is free then), never a third at once."""
    with RedisNode.started() as node:
        await asyncio.sleep(5)  # an old Redis: no wait before the restart
        rates = [RedisRates(node.url + "?socket_timeout=1") for _ in range(3)]
        caps = [SharedCap(r.places("restart:k", 2), outage_wait=0.2) for r in rates]
        loop = asyncio.get_running_loop()
        running = peak = done = 0
        starts: list[float] = []

        async def job(cap: SharedCap) -> None:
            nonlocal running, peak, done
            await cap.acquire()
            starts.append(loop.time())
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(1.5 if len(starts) == 1 else 12.0)
            running -= 1
            cap.release()
            done += 1

        jobs = [asyncio.create_task(job(caps[i % 3])) for i in range(6)]
        try:
            async with asyncio.timeout(BOUND):
                while running < 2:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)
            await asyncio.to_thread(node.restart, 1.5)
            back = loop.time()
            await asyncio.wait_for(asyncio.gather(*jobs), 120)
            after = [t for t in starts if t > back]
            first = min(after) - back
            print(f"\nrestarted Redis: the first new capped start {first:.1f} s after it "
                  f"came back; at most {peak} at once (cap 2)")  # fmt: skip
            assert done == 6
            assert peak == 2, f"{peak} handlers ran at once with a cap of 2"
            # One place is free from the restart on: the wait is the fence's alone.
            assert first < BOUND
        finally:
            for task in jobs:
                task.cancel()
            for cap in caps:
                await cap.close()
            for r in rates:
                await r.close()
