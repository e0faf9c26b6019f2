"""The shared rate budget against the real Redis on this machine (127.0.0.1:6379).

Each test uses its own key prefix and deletes its keys. Two processes share one
budget: their start times are counted in sliding one-second windows.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from rabbitq.ratelimit import RedisRates
from rabbitq.ratelimit.rate import parse_rate
from tests.helpers import REDIS_URL, window_spans

redis_asyncio = pytest.importorskip("redis.asyncio")


async def _start(rates: RedisRates, key: str, rate) -> float:
    """Ask until allowed, as the gate does; return when it was allowed (loop time)."""
    while wait := await rates.acquire(key, rate):
        await asyncio.sleep(wait)
    return asyncio.get_running_loop().time()


async def test_two_clients_share_one_budget(prefix: str) -> None:
    a, b = RedisRates(REDIS_URL, prefix=prefix), RedisRates(REDIS_URL, prefix=prefix)
    rate = parse_rate("20/s")

    async def client(rates: RedisRates) -> list[float]:
        return [await _start(rates, "emails:send", rate) for _ in range(10)]

    starts = sorted(sum(await asyncio.gather(client(a), client(b)), []))
    gaps = sorted(b - a for a, b in zip(starts, starts[1:], strict=False))
    # Twenty starts one interval apart as Redis decided them; measured here, each also
    # carries its own reply's latency, so single gaps wobble but the whole cannot shrink.
    assert len(starts) == 20
    assert starts[-1] - starts[0] >= 0.9  # 19 intervals, less one reply's latency
    assert 0.04 <= gaps[len(gaps) // 2] <= 0.1
    await a.close()
    await b.close()


async def test_a_denied_call_is_told_when_to_ask_again(prefix: str) -> None:
    rates = RedisRates(REDIS_URL, prefix=prefix)
    rate = parse_rate("2/10s")  # an interval of 5 s: much more than three round trips
    assert await rates.acquire("a", rate) == 0.0
    assert await rates.acquire("b", rate) == 0.0  # keys are apart
    wait = await rates.acquire("a", rate)
    assert 4.5 < wait <= 5.0
    client = redis_asyncio.Redis.from_url(REDIS_URL)
    ttl = await client.pttl(prefix + "a")
    assert 0 < ttl <= 6000  # the budget is full again in 5 s, plus a second of slack
    await client.aclose()
    await rates.close()


async def test_a_burst_is_shared_too(prefix: str) -> None:
    rates = RedisRates(REDIS_URL, prefix=prefix)
    rate = parse_rate("10/10s", burst=3)  # an interval of 1 s: more than four round trips
    answers = [await rates.acquire("k", rate) for _ in range(4)]
    assert answers[:3] == [0.0, 0.0, 0.0] and 0.5 < answers[3] <= 1.0
    await rates.close()


async def test_a_client_passed_in_is_not_closed(prefix: str) -> None:
    client = redis_asyncio.Redis.from_url(REDIS_URL)
    rates = RedisRates(client, prefix=prefix)
    await rates.acquire("k", parse_rate("1/s"))
    await rates.close()
    assert await client.ping()
    await client.aclose()


_CHILD = """
import asyncio, sys, time
from rabbitq.ratelimit import RedisRates
from rabbitq.ratelimit.rate import parse_rate

async def main(url, prefix, n):
    rates = RedisRates(url, prefix=prefix)
    rate = parse_rate("20/s")
    for _ in range(n):
        while wait := await rates.acquire("shared", rate):
            await asyncio.sleep(wait)
        print(time.time(), flush=True)
    await rates.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


@pytest.mark.slow
def test_two_processes_never_start_more_than_twenty_in_a_second(prefix: str) -> None:
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, REDIS_URL, prefix, "100"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    starts = []
    for child in children:
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0
        starts += [float(line) for line in out.split()]
    assert len(starts) == 200
    # Redis lets the starts go at least 50 ms apart (a little more: each waiter asks again
    # when told), so every 21 take a second or more, whatever calendar seconds they
    # straddle, and every 101 five seconds or more; each is printed a little after. Two
    # budgets of 20/s would put 21 in ~0.5 s; one of 21/s 101 in 4.76 s plus the asking
    # (~0.2 s here).
    closest = window_spans(starts, 21)[0]
    spans = window_spans(starts, 101)
    median = spans[len(spans) // 2]
    print(f"\n21 starts in {closest:.3f} s at the closest, 101 in {median:.3f} s in the median")
    assert closest >= 0.9, sorted(starts)
    assert median >= 4.99, sorted(starts)
    assert max(starts) - min(starts) >= 9.5
