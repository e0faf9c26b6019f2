"""The arrival lookups' coalescer (rabbitq/cancellation/lookups.py), without a store:
many lookups asked together make one store call with each answer right; an error of
that call reaches every waiter (so each message is held); what is asked while a call is
in flight waits for it and goes in the next; a waiter that gave up is left out."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from rabbitq.cancellation.lookups import LookupCancelled, Lookups, answers
from rabbitq.effects.store import StoreUnavailable


class Store:
    """``which`` over a set of cancelled ids, recording each call; ``gate`` holds a call
    until set; ``down`` makes it fail."""

    def __init__(self, cancelled: set[str]) -> None:
        self.cancelled = cancelled
        self.calls: list[list[str]] = []
        self.down = False
        self.gate: asyncio.Event | None = None

    async def which(self, ids: Sequence[str]) -> set[str]:
        self.calls.append(list(ids))
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise StoreUnavailable("cannot reach the store")
        return self.cancelled & set(ids)


def test_answers_are_per_id() -> None:
    assert answers(["a", "b", "a", "c"], {"a", "c"}) == [True, False, True, True]
    assert answers([], {"a"}) == []


def test_bad_settings_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="window >= 0 and max_ids >= 1"):
        Lookups(Store(set()).which, window=-1)
    with pytest.raises(ValueError, match="max_ids >= 1"):
        Lookups(Store(set()).which, max_ids=0)


async def test_many_concurrent_lookups_make_one_store_call() -> None:
    store = Store({f"m{i}" for i in range(0, 100, 3)})
    lookups = Lookups(store.which, window=0.05)

    async def one(i: int) -> bool:
        await asyncio.sleep(0.001 * (i % 5))  # spread over a few turns, within the window
        return await lookups.ask(f"m{i}")

    got = await asyncio.gather(*(one(i) for i in range(100)))
    assert got == [i % 3 == 0 for i in range(100)]
    assert len(store.calls) == 1 and sorted(store.calls[0]) == sorted(f"m{i}" for i in range(100))
    assert lookups.calls == 1


async def test_a_redelivered_id_is_asked_once_and_answered_twice() -> None:
    store = Store({"x"})
    lookups = Lookups(store.which, window=0.01)
    got = await asyncio.gather(lookups.ask("x"), lookups.ask("y"), lookups.ask("x"))
    assert got == [True, False, True]
    assert store.calls == [["x", "y"]]


async def test_max_ids_ends_the_window_at_once() -> None:
    store = Store(set())
    lookups = Lookups(store.which, window=60, max_ids=10)  # the window alone would hang
    got = await asyncio.wait_for(asyncio.gather(*(lookups.ask(f"m{i}") for i in range(20))), 30)
    assert got == [False] * 20
    assert [len(c) for c in store.calls] == [10, 10]


async def test_an_error_reaches_every_waiter() -> None:
    store = Store({"m1"})
    store.down = True
    lookups = Lookups(store.which, window=0.01)
    got = await asyncio.gather(*(lookups.ask(f"m{i}") for i in range(50)), return_exceptions=True)
    assert len(store.calls) == 1
    assert all(isinstance(r, StoreUnavailable) for r in got), got
    store.down = False  # the store is back: the next lookups answer
    assert await asyncio.gather(lookups.ask("m1"), lookups.ask("m2")) == [True, False]


async def test_lookups_asked_during_a_call_wait_for_it_and_go_in_the_next() -> None:
    store = Store({"late"})
    store.gate = asyncio.Event()
    lookups = Lookups(store.which, window=0.001)
    first = lookups.ask("early")
    for _ in range(200):  # until the first call is in flight
        if store.calls:
            break
        await asyncio.sleep(0.005)
    later = [lookups.ask("late"), lookups.ask("other")]
    await asyncio.sleep(0.05)  # many windows: still one call, in flight
    assert store.calls == [["early"]]
    store.gate.set()
    assert await first is False
    assert await asyncio.gather(*later) == [True, False]
    assert store.calls == [["early"], ["late", "other"]]


async def test_a_waiter_that_gave_up_is_left_out() -> None:
    store = Store(set())
    lookups = Lookups(store.which, window=0.02)
    gone = lookups.ask("gone")
    kept = lookups.ask("kept")
    gone.cancel()
    assert await kept is False
    assert store.calls == [["kept"]]


async def test_a_cancelled_call_fails_its_waiters_and_drain_waits() -> None:
    store = Store(set())
    store.gate = asyncio.Event()
    lookups = Lookups(store.which, window=0.001)
    waiter = lookups.ask("m")
    for _ in range(200):
        if store.calls:
            break
        await asyncio.sleep(0.005)
    for flight in list(lookups._flights):
        flight.cancel()
    with pytest.raises(LookupCancelled):
        await waiter
    lookups.window = 60
    pending = lookups.ask("n")  # drain sends it without waiting for the window
    store.gate.set()
    await asyncio.wait_for(lookups.drain(), 30)
    assert pending.done() and pending.result() is False
