"""The circuit breaker's state machine (pure, with a clock we move by hand) and the
guard that pauses and resumes a worker's consumer."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq import App, Breaker, ConfigurationError, Message
from rabbitq.breaker import CLOSED, HALF_OPEN, OPEN, Circuit, combined, verdict
from rabbitq.hooks import Hooks
from rabbitq.retry import DeadLetter, Retry
from rabbitq.worker.breaker_guard import BreakerGuard
from rabbitq.worker.outcome import ACK

CONFIG = Breaker(
    failure_ratio=0.5, window=10, window_seconds=60, min_calls=4, cooldown=30, probes=2
)


def circuit_after(outcomes: list[bool], config: Breaker = CONFIG) -> Circuit:
    circuit = Circuit(config)
    for i, ok in enumerate(outcomes):
        circuit.record(ok, float(i))
    return circuit


def test_a_breaker_stays_closed_below_the_minimum_volume():
    assert circuit_after([False, False, False]).state == CLOSED


def test_a_breaker_opens_when_the_failure_ratio_reaches_the_threshold():
    assert circuit_after([True, True, False, False]).state == OPEN


def test_a_breaker_stays_closed_below_the_threshold():
    assert circuit_after([True, True, True, False, True, False, True]).state == CLOSED


def test_only_the_last_window_outcomes_count():
    config = Breaker(failure_ratio=0.6, window=4, min_calls=4)
    # 4 of 6 failed (0.67), but never more than 2 of the last 4 (0.5)
    assert circuit_after([False, False, True, True, False, False], config).state == CLOSED


def test_outcomes_older_than_the_window_seconds_do_not_count():
    circuit = Circuit(CONFIG)
    for t in (0.0, 1.0, 2.0):
        circuit.record(False, t)
    circuit.record(False, 100.0)  # the three before are over 60 s old
    assert circuit.state == CLOSED


def test_an_open_breaker_refuses_until_the_cooldown_is_over_then_lets_probes_through():
    circuit = circuit_after([False] * 4)
    opened = circuit.opened_at
    assert circuit.allow(opened + 29) is False
    assert circuit.allow(opened + 30) is True
    assert circuit.state == HALF_OPEN
    assert circuit.allow(opened + 30) is True
    assert circuit.allow(opened + 30) is None  # both probes are out


def test_probes_that_succeed_close_the_breaker():
    circuit = circuit_after([False] * 4)
    now = circuit.opened_at + 30
    assert circuit.allow(now) and circuit.allow(now)
    circuit.record(True, now, probe=True)
    assert circuit.state == HALF_OPEN
    circuit.record(True, now, probe=True)
    assert circuit.state == CLOSED
    assert circuit.allow(now) is True


def test_a_probe_that_fails_reopens_the_breaker_for_another_cooldown():
    circuit = circuit_after([False] * 4)
    now = circuit.opened_at + 30
    assert circuit.allow(now)
    circuit.record(False, now, probe=True)
    assert circuit.state == OPEN and circuit.opened_at == now
    assert circuit.allow(now + 29) is False


def test_a_probe_without_a_verdict_frees_its_slot():
    circuit = circuit_after([False] * 4)
    now = circuit.opened_at + 30
    assert circuit.allow(now) and circuit.allow(now)
    circuit.record(None, now, probe=True)  # e.g. an invalid message
    assert circuit.state == HALF_OPEN
    assert circuit.allow(now) is True


def test_outcomes_of_handlers_that_started_before_the_breaker_opened_are_ignored():
    circuit = circuit_after([False] * 4)
    circuit.record(True, circuit.opened_at + 1)
    assert circuit.state == OPEN
    circuit.tick(circuit.opened_at + 30)
    circuit.record(False, circuit.opened_at + 31)  # not a probe
    assert circuit.state == HALF_OPEN


def test_retries_and_exhaustion_are_failures_permanent_and_invalid_say_nothing():
    assert verdict(ACK) is True
    assert verdict(Retry(1000, 2)) is False
    assert verdict(DeadLetter("exhausted")) is False
    assert verdict(DeadLetter("permanent")) is None
    assert verdict(DeadLetter("invalid")) is None


def test_the_queue_is_open_if_any_circuit_is():
    assert combined([CLOSED, HALF_OPEN, OPEN]) == OPEN
    assert combined([CLOSED, HALF_OPEN]) == HALF_OPEN
    assert combined([]) == CLOSED


@pytest.mark.parametrize(
    "kwargs",
    [
        {"failure_ratio": 0},
        {"failure_ratio": 1.5},
        {"window": 0},
        {"probes": 0},
        {"min_calls": 30, "window": 20},
        {"cooldown": 0},
        {"window_seconds": -1},
        {"probes": 1.5},
    ],
)
def test_an_impossible_breaker_is_a_configuration_error(kwargs):
    with pytest.raises(ConfigurationError):
        Breaker(**kwargs)


class Mail(Message, type="breaker.mail"):
    to: str


def test_a_handler_gets_the_apps_breaker_unless_it_sets_its_own_or_none():
    app = App(queue="q", breaker=CONFIG)
    own = Breaker(cooldown=5)

    class Other(Message, type="breaker.other"):
        n: int

    class Third(Message, type="breaker.third"):
        n: int

    app.handler(Mail)(lambda m: None)
    app.handler(Other, breaker=own)(lambda m: None)
    app.handler(Third, breaker=None)(lambda m: None)
    assert app.handlers["breaker.mail"].breaker is CONFIG
    assert app.handlers["breaker.other"].breaker is own
    assert app.handlers["breaker.third"].breaker is None
    assert App(queue="q").breaker is None  # off by default


# -- the guard -------------------------------------------------------------------------


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
    """Records what the guard asks of the consumer (rabbitq.worker.consumer.Consumer)."""

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
