"""A shared cap's holder killed with ``kill -9``: its places come back one lease later
(the real Redis; moved here from tests/ratelimit/test_lease.py with the other kill
tests)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import pytest

from rabbitq.ratelimit import RedisRates
from tests.helpers import REDIS_URL


@pytest.fixture
def prefix(redis_prefix: str) -> str:
    """A Redis key prefix of this test's own, as in tests/ratelimit (cleaned after)."""
    return redis_prefix


_HOLDER = """
import asyncio, sys
from rabbitq.ratelimit import RedisRates
from rabbitq.ratelimit.cap import SharedCap

async def main(url, prefix):
    cap = SharedCap(RedisRates(url, prefix=prefix, lease=2.0).places("k", 2))
    await cap.acquire()
    await cap.acquire()
    print("holding", flush=True)
    await asyncio.sleep(60)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.mark.slow
async def test_a_killed_holders_places_come_back_after_the_lease(prefix: str) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, REDIS_URL, prefix], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert await asyncio.to_thread(holder.stdout.readline) == "holding\n"
        await asyncio.sleep(2.5)  # more than a lease: its renewals keep both places
        rates = RedisRates(REDIS_URL, prefix=prefix)
        places = rates.places("k", 2)
        assert not await places.take("after")
        loop = asyncio.get_running_loop()
        holder.send_signal(signal.SIGKILL)
        killed = loop.time()
        await asyncio.to_thread(holder.wait, 10)
        assert not await places.take("after")  # still held: the leases have not expired
        while not await places.take("after"):
            assert loop.time() - killed < 5.0, "the killed holder's places never came back"
            await asyncio.sleep(0.02)
        back = loop.time() - killed
        assert await places.take("after-2") and not await places.take("after-3")
        print(f"\na killed holder's places came back {back:.2f} s after kill -9 (lease 2 s)")
        # At most one lease after its last renewal (a third of a lease before the kill
        # if it was on time), plus slack for this loop.
        assert back <= 2.0 + 0.5
        await rates.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
