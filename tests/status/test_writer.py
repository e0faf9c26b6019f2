"""The status writer: batched, off the caller's path, best effort and counted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from rabbitq.status.model import RECEIVED, Record
from rabbitq.status.writer import DROPPED, FAILED, WRITTEN, StatusWriter


class FakeStore:
    def __init__(self) -> None:
        self.writes: list[list[Record]] = []
        self.down = False
        self.closed = 0

    async def write(self, records: Sequence[Record]) -> None:
        await asyncio.sleep(0)
        if self.down:
            raise ConnectionError("refused")
        self.writes.append(list(records))

    async def read(self, message_id: str) -> list[Record]:
        return [r for w in self.writes for r in w if r.message_id == message_id]

    async def close(self) -> None:
        self.closed += 1


def _rec(i: int) -> Record:
    return Record(f"m{i}", RECEIVED, float(i), 1)


async def test_records_are_written_in_batches_by_one_task():
    store = FakeStore()
    writer = StatusWriter(store, batch=100, interval=0.05)
    for i in range(250):
        writer.add(_rec(i))  # returns at once: nothing written yet
    assert store.writes == []
    await writer.flush()
    assert [len(w) for w in store.writes] == [100, 100, 50]
    assert [r.message_id for w in store.writes for r in w] == [f"m{i}" for i in range(250)]
    assert writer.counts == {WRITTEN: 250, FAILED: 0, DROPPED: 0}
    assert store.closed == 1 and writer.queued == 0


async def test_the_task_ends_when_the_queue_is_empty_and_starts_again_with_a_record():
    store = FakeStore()
    writer = StatusWriter(store, interval=0.01)
    writer.add(_rec(1))
    await asyncio.sleep(0.2)  # the interval passes: written, the task is gone
    assert len(store.writes) == 1 and writer._task is None
    writer.add(_rec(2))
    await writer.flush()
    assert writer.counts[WRITTEN] == 2


async def test_an_outage_loses_records_counted_and_logged_once(caplog):
    store = FakeStore()
    writer = StatusWriter(store, batch=10, interval=0.01, backoff=0.01)
    store.down = True
    with caplog.at_level(logging.WARNING, logger="rabbitq.status"):
        for i in range(35):
            writer.add(_rec(i))
            await asyncio.sleep(0)
        await writer.flush()
        lost = writer.counts[FAILED]
        assert lost == 35 and writer.counts[WRITTEN] == 0
        store.down = False
        writer.add(_rec(99))
        await writer.flush()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # one when the outage began, one when it ended
    assert "being lost" in lines[0] and "35 status record(s) were lost" in lines[1]
    assert writer.counts == {WRITTEN: 1, FAILED: 35, DROPPED: 0}


async def test_a_full_queue_drops_new_records_and_counts_them():
    store = FakeStore()
    writer = StatusWriter(store, capacity=5, batch=100, interval=10)
    for i in range(8):
        writer.add(_rec(i))
    assert writer.queued == 5 and writer.counts[DROPPED] == 3
    await writer.flush()
    assert writer.counts == {WRITTEN: 5, FAILED: 0, DROPPED: 3}


async def test_a_flush_that_cannot_finish_in_time_counts_the_rest_as_dropped():
    class Stuck(FakeStore):
        async def write(self, records: Sequence[Record]) -> None:
            await asyncio.sleep(30)

    writer = StatusWriter(Stuck(), batch=2, interval=0.01)
    for i in range(5):
        writer.add(_rec(i))
    await writer.flush(timeout=0.1)
    assert writer.counts[DROPPED] == 5  # the batch in flight too
    assert writer.queued == 0


def test_a_record_without_an_event_loop_is_dropped_not_raised():
    writer = StatusWriter(FakeStore())
    writer.add(_rec(1))
    assert writer.counts[DROPPED] == 1


@pytest.mark.parametrize("n", [1])
async def test_observers_see_every_count(n):
    seen: list[tuple[str, int]] = []

    class Obs:
        def status_records(self, outcome: str, count: int) -> None:
            seen.append((outcome, count))

    writer = StatusWriter(FakeStore(), interval=0.01)
    writer.observers.append(Obs())
    writer.add(_rec(n))
    await writer.flush()
    assert seen == [(WRITTEN, 1)]


async def test_records_arriving_during_a_write_wait_for_the_next_batch():
    store = FakeStore()
    writer = StatusWriter(store, batch=100, interval=0.05)
    for i in range(1000):  # a steady stream: 10 records between event-loop turns
        writer.add(_rec(i))
        if i % 10 == 9:
            await asyncio.sleep(0)
    await writer.flush()
    assert sum(len(w) for w in store.writes) == 1000
    assert len(store.writes) == 10  # full batches, not one small write per loop turn


async def test_records_left_when_the_writer_is_cancelled_are_counted():
    writer = StatusWriter(FakeStore(), interval=10)
    for i in range(7):
        writer.add(_rec(i))
    await asyncio.sleep(0)  # the task waits for company
    assert writer._task is not None
    writer._task.cancel()  # as the end of asyncio.run() does
    with pytest.raises(asyncio.CancelledError):
        await writer._task
    assert writer.counts[DROPPED] == 7 and writer.queued == 0
