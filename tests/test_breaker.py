"""The circuit breaker's state machine (pure, with a clock we move by hand); the guard
that applies it in a worker is tests/worker/test_breaker_guard.py."""

from __future__ import annotations

import pytest

from rabbitq import App, Breaker, ConfigurationError, Message
from rabbitq.breaker import CLOSED, HALF_OPEN, OPEN, Circuit, combined, verdict
from rabbitq.outcome import ACK, DeadLetter, Retry

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
