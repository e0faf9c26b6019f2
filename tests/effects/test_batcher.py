"""The group-commit batcher of the stores: pure decisions, then its behaviour on a loop
with a fake flush (no store)."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq.effects.batcher import Batcher, FlushCancelled, can_start, take


def test_take_keeps_order_drops_callers_gone_and_defers_a_repeated_key() -> None:
    items = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("gone", 5), ("d", 6)]
    batch, rest = take(items, limit=3, waiting=lambda p: p[0] != "gone", key=lambda p: p[0])
    assert batch == [("a", 1), ("b", 2), ("c", 4)]
    assert rest == [("a", 3), ("d", 6)]  # the repeated key and the one over the limit


def test_take_without_a_key_takes_repeats_together() -> None:
    batch, rest = take(["x", "x", "y"], limit=10, waiting=lambda p: True)
    assert (batch, rest) == (["x", "x", "y"], [])


def test_a_flush_starts_only_for_waiting_items_and_below_the_limit() -> None:
    assert can_start(pending=1, starting=False, in_flight=0, max_in_flight=1)
    assert not can_start(pending=0, starting=False, in_flight=0, max_in_flight=1)
    assert not can_start(pending=5, starting=True, in_flight=0, max_in_flight=1)
    assert not can_start(pending=5, starting=False, in_flight=1, max_in_flight=1)
    assert can_start(pending=5, starting=False, in_flight=1, max_in_flight=2)


class Recorder:
    """A flush that records its batches and can be held open."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, items: list[int]) -> list[int | Exception]:
        self.batches.append(list(items))
        if self.gate is not None:
            await self.gate.wait()
        return [ValueError(i) if i < 0 else i * 10 for i in items]


async def test_the_calls_of_one_loop_turn_go_in_one_flush_with_no_timer() -> None:
    flush = Recorder()
    batcher: Batcher[int, int] = Batcher(flush)
    assert await asyncio.gather(*(batcher.submit(i) for i in range(50))) == [
        i * 10 for i in range(50)
    ]
    assert flush.batches == [list(range(50))]
    assert await batcher.submit(7) == 70  # a lone call goes on its own
    assert flush.batches[-1] == [7]


async def test_calls_issued_during_a_flush_go_together_in_the_next() -> None:
    flush = Recorder()
    flush.gate = asyncio.Event()
    batcher: Batcher[int, int] = Batcher(flush)
    first = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0.01)
    assert flush.batches == [[1]]  # in flight, held
    later = [asyncio.ensure_future(batcher.submit(i)) for i in (2, 3, 4)]
    await asyncio.sleep(0.01)
    assert flush.batches == [[1]] and batcher.pending == 3  # waiting for the first
    flush.gate.set()
    assert await first == 10 and await asyncio.gather(*later) == [20, 30, 40]
    assert flush.batches == [[1], [2, 3, 4]]


async def test_an_items_error_is_its_callers_alone_and_a_failed_flush_fails_all() -> None:
    flush = Recorder()
    batcher: Batcher[int, int] = Batcher(flush)
    results = await asyncio.gather(batcher.submit(-1), batcher.submit(2), return_exceptions=True)
    assert isinstance(results[0], ValueError) and results[1] == 20

    async def broken(items: list[int]) -> list[int]:
        raise ConnectionError("cut")

    batcher = Batcher(broken)
    results = await asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)


async def test_a_caller_cancelled_before_the_flush_is_left_out() -> None:
    flush = Recorder()
    batcher: Batcher[int, int] = Batcher(flush)
    gone = batcher.submit(1)
    kept = batcher.submit(2)
    gone.cancel()  # both submitted, the flush not yet run (it starts on the next turn)
    assert await kept == 20
    assert flush.batches == [[2]]


async def test_two_calls_with_one_key_never_share_a_flush() -> None:
    flush = Recorder()
    batcher: Batcher[int, int] = Batcher(flush, key=lambda i: i % 2)
    assert await asyncio.gather(*(batcher.submit(i) for i in (1, 2, 3, 4, 5))) == [
        10,
        20,
        30,
        40,
        50,
    ]
    assert flush.batches == [[1, 2], [3, 4], [5]]


async def test_a_cancelled_flush_fails_its_callers_and_drain_waits_for_the_rest() -> None:
    flush = Recorder()
    flush.gate = asyncio.Event()
    batcher: Batcher[int, int] = Batcher(flush)
    held = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0.01)
    (task,) = batcher._flushes
    task.cancel()
    with pytest.raises(FlushCancelled):
        await held
    queued = [asyncio.ensure_future(batcher.submit(i)) for i in (2, 3)]
    await asyncio.sleep(0)
    flush.gate.set()
    await batcher.drain()
    assert all(t.done() for t in queued) and [t.result() for t in queued] == [20, 30]


async def test_up_to_max_in_flight_flushes_run_at_once() -> None:
    flush = Recorder()
    flush.gate = asyncio.Event()
    batcher: Batcher[int, int] = Batcher(flush, max_batch=2, max_in_flight=2)
    calls = [asyncio.ensure_future(batcher.submit(i)) for i in range(5)]
    await asyncio.sleep(0.01)
    assert flush.batches == [[0, 1], [2, 3]]  # two in flight, the fifth waits
    flush.gate.set()
    assert await asyncio.gather(*calls) == [0, 10, 20, 30, 40]
    assert flush.batches[-1] == [4]


async def test_a_flush_cancelled_before_it_ran_leaves_its_items_to_the_next() -> None:
    flush = Recorder()
    batcher: Batcher[int, int] = Batcher(flush)
    first = batcher.submit(1)
    (task,) = batcher._flushes
    task.cancel()  # before its first step: it took nothing
    assert await first == 10
    assert flush.batches == [[1]]
