"""The breaker guard, without a broker: it pauses the consumer while a circuit is open,
lets probes through after the cool-down, and releases waiting deliveries on close."""

from __future__ import annotations

import asyncio

from rabbitq import Breaker
from rabbitq._worker.breaker_guard import BreakerGuard
from rabbitq.breaker import CLOSED, HALF_OPEN, OPEN
from rabbitq.hooks import Hooks
from rabbitq.outcome import ACK, DeadLetter, Retry
from tests.test_breaker import CONFIG


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class States(Hooks):
    def __init__(self) -> None:
        self.states: list[str] = []

    def breaker_changed(self, queue: str, state: str) -> None:
        self.states.append(state)


class Paused:
    """Records what the guard asks of the consumer (rabbitq._worker.consumer.Consumer)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.why: dict[str, str] = {}

    def pause(self, reason: str, why: str) -> None:
        self.calls.append("pause")
        self.why[reason] = why

    def resume(self, reason: str) -> None:
        self.calls.append("resume")
        self.why.pop(reason, None)

    @property
    def stopping(self) -> bool:
        return False


async def make_guard(config: Breaker = CONFIG):
    consumer, clock, hooks = Paused(), Clock(), States()
    guard = BreakerGuard("q", {"mail": config}, consumer=consumer, hooks=hooks, clock=clock)
    hooks.consumer = consumer
    return guard, consumer.calls, clock, hooks


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_guard_pauses_the_consumer_when_a_circuit_opens_and_refuses_stragglers():
    guard, calls, _, hooks = await make_guard()
    for _ in range(4):
        assert await guard.admit("mail")
        guard.record("mail", Retry(1000, 2))
    await settle()
    assert calls == ["pause"] and hooks.states == [OPEN]
    assert hooks.consumer.why == {"breaker_open": "circuit breaker open for mail"}
    assert await guard.admit("mail") is False  # delivered before the cancel: requeue it
    assert await guard.admit("other") is True  # a type without a breaker runs
    guard.close()


async def test_the_guard_resumes_after_the_cooldown_and_closes_when_probes_succeed():
    guard, calls, clock, hooks = await make_guard(
        Breaker(min_calls=1, window=1, cooldown=0.05, probes=2)
    )
    assert await guard.admit("mail")
    clock.now += 1
    guard.record("mail", Retry(1000, 2))
    clock.now += 1  # the cool-down is over when the timer fires
    await asyncio.sleep(0.1)
    await settle()
    assert calls == ["pause", "resume"] and hooks.states == [OPEN, HALF_OPEN]

    async def probe() -> bool:
        ok = await guard.admit("mail")
        await asyncio.sleep(0)
        guard.record("mail", ACK)
        return ok

    first, second = asyncio.create_task(probe()), asyncio.create_task(probe())
    waiting = asyncio.create_task(guard.admit("mail"))  # a third waits for the verdict
    await settle()
    assert await first and await second
    assert await waiting is True
    assert hooks.states == [OPEN, HALF_OPEN, CLOSED]
    guard.close()


async def test_a_failed_probe_reopens_and_the_waiting_deliveries_go_back():
    guard, calls, clock, hooks = await make_guard(
        Breaker(min_calls=1, window=1, cooldown=0.05, probes=1)
    )
    assert await guard.admit("mail")
    guard.record("mail", Retry(1000, 2))
    clock.now += 1
    await asyncio.sleep(0.1)
    assert await guard.admit("mail")  # the probe
    waiting = asyncio.create_task(guard.admit("mail"))
    await settle()
    guard.record("mail", DeadLetter("exhausted"))
    assert await waiting is False
    await settle()
    assert calls == ["pause", "resume", "pause"]
    assert hooks.states == [OPEN, HALF_OPEN, OPEN]
    guard.close()


async def test_closing_the_guard_releases_deliveries_waiting_for_a_verdict():
    guard, _, clock, _ = await make_guard(Breaker(min_calls=1, window=1, cooldown=0.05, probes=1))
    assert await guard.admit("mail")
    guard.record("mail", Retry(1000, 2))
    clock.now += 1
    await asyncio.sleep(0.1)
    assert await guard.admit("mail")
    waiting = asyncio.create_task(guard.admit("mail"))
    await settle()
    guard.close()
    assert await waiting is False
