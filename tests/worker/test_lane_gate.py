"""The gate between priority lanes (rabbitq._worker.lane_gate): a higher lane goes
first by weight, the lowest is never starved, a lone lane takes every slot, and a
cancelled waiter gives its slot on."""

from __future__ import annotations

import asyncio

from rabbitq._worker.lane_gate import LaneGate


async def _run(gate: LaneGate, waiting: dict[int, int], starts: int) -> list[int]:
    """Fill the slots, queue ``waiting`` deliveries per lane, then let ``starts`` in one
    at a time (each leaves at once); the order in which lanes were let in."""
    for _ in range(gate.slots):
        await gate.enter(0)  # every slot busy
    order: list[int] = []

    async def one(level: int) -> None:
        await gate.enter(level)
        order.append(level)

    tasks = [asyncio.create_task(one(lv)) for lv, n in waiting.items() for _ in range(n)]
    await asyncio.sleep(0)
    for _ in range(starts):
        gate.leave()
        await asyncio.sleep(0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return order


async def test_busy_lanes_share_the_slots_by_weight():
    # (within one: the slots the filling took count against lane 0's first turn)
    order = await _run(LaneGate(2, 3), {0: 500, 2: 500}, 500)
    assert abs(order.count(0) - 100) <= 1 and len(order) == 500  # 4:1
    order = await _run(LaneGate(2, 3), {0: 100, 1: 100, 2: 100}, 70)
    counts = (order.count(2), order.count(1), order.count(0))
    assert all(abs(got - want) <= 1 for got, want in zip(counts, (40, 20, 10), strict=True))


async def test_the_lowest_lane_is_never_starved_and_a_lone_lane_takes_every_slot():
    order = await _run(LaneGate(2, 3), {0: 5, 2: 1000}, 100)
    assert order.count(0) == 5  # all of them, by weight: one in every five starts
    assert max(i for i, lv in enumerate(order) if lv == 0) < 30
    assert await _run(LaneGate(2, 3), {0: 20}, 20) == [0] * 20


async def test_a_high_delivery_waits_for_its_turn_not_for_the_low_backlog():
    order = await _run(LaneGate(2, 3), {0: 1000, 2: 3}, 10)
    assert [i for i, lv in enumerate(order) if lv == 2] == [0, 1, 2]


async def test_a_cancelled_waiter_passes_its_slot_on():
    gate = LaneGate(1, 2)
    await gate.enter(0)
    first = asyncio.create_task(gate.enter(1))
    second = asyncio.create_task(gate.enter(0))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    gate.leave()
    await asyncio.wait_for(second, 1)
    assert gate.free == 0
    gate.leave()
    assert gate.free == 1


async def test_a_waiter_let_in_and_cancelled_before_it_ran_gives_the_slot_back():
    gate = LaneGate(1, 2)
    await gate.enter(0)
    let_in = asyncio.create_task(gate.enter(1))
    await asyncio.sleep(0)
    gate.leave()  # lets `let_in` in (its future done) ...
    let_in.cancel()  # ... which is cancelled before it runs
    await asyncio.gather(let_in, return_exceptions=True)
    assert let_in.cancelled() and gate.free == 1
