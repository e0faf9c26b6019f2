"""The sync-handler pool: a hung handler's thread is replaced (bounded and reported),
a handler's time limit starts when it starts, and a call that never found a thread
says so instead of counting as a timeout."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rabbitq._worker.handler_pool import Expired, HandlerPool, NotStarted


@pytest.fixture
def release():
    event = threading.Event()
    yield event
    event.set()


async def test_a_hung_handlers_thread_is_replaced_so_healthy_ones_still_run(release):
    reported: list[tuple[str, int]] = []
    pool = HandlerPool(2, max_abandoned=4, abandoned=lambda n, c: reported.append((n, c)))
    for _ in range(4):  # four hung handlers, two at a time: more than the pool's size
        with pytest.raises(Expired):
            await pool.run(lambda: release.wait(30), timeout=0.05, name="hangs")
    assert await pool.run(lambda: "ok", timeout=1, name="healthy") == "ok"
    assert reported == [("hangs", 1), ("hangs", 2), ("hangs", 3), ("hangs", 4)]
    assert pool.abandoned_count == 4
    pool.shutdown()


async def test_past_the_bound_a_call_that_finds_no_thread_did_not_run_and_says_why(release):
    pool = HandlerPool(1, max_abandoned=1)
    for _ in range(2):
        with pytest.raises(Expired):
            await pool.run(lambda: release.wait(30), timeout=0.05, name="hangs")
    ran = []
    with pytest.raises(NotStarted, match="2 of 2 threads are held"):
        await pool.run(lambda: ran.append(1), timeout=0.1, name="healthy")
    release.set()
    assert await pool.run(lambda: "ok", timeout=5, name="healthy") == "ok"
    assert ran == []  # the call given up on never runs later
    pool.shutdown()


async def test_an_abandoned_thread_that_returns_rejoins_the_pool_and_is_reported():
    gate = threading.Event()
    abandoned: list[tuple[str, int]] = []
    returned: list[tuple[str, int]] = []
    pool = HandlerPool(
        1,
        max_abandoned=1,
        abandoned=lambda n, c: abandoned.append((n, c)),
        returned=lambda n, c: returned.append((n, c)),
    )
    with pytest.raises(Expired):
        await pool.run(lambda: gate.wait(30), timeout=0.05, name="slow")
    assert (abandoned, returned) == ([("slow", 1)], [])
    gate.set()
    assert await pool.run(lambda: 7, timeout=5, name="x") == 7
    # The replacement thread may run that call before the released one has woken: wait
    # (bounded) for the returning thread to be counted back, and reported on the loop so
    # that the abandoned-threads metric goes down again.
    for _ in range(100):
        if pool.abandoned_count == 0 and returned:
            break
        await asyncio.sleep(0.05)
    assert pool.abandoned_count == 0
    assert returned == [("slow", 0)]
    pool.shutdown()


async def test_a_handler_that_returns_in_time_is_not_reported_as_returned():
    returned: list[tuple[str, int]] = []
    pool = HandlerPool(1, returned=lambda n, c: returned.append((n, c)))
    assert await pool.run(lambda: 7, timeout=5, name="x") == 7
    await asyncio.sleep(0.05)
    assert returned == []
    pool.shutdown()


async def test_a_handlers_exception_reaches_the_caller():
    pool = HandlerPool(1)

    def boom() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await pool.run(boom, timeout=None, name="boom")
    pool.shutdown()
