"""RetryLater: the delay it asks for, in the delay ladder, without using up an attempt."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from rabbitq import App, Message, PermanentError, RetryLater, RetryPolicy
from rabbitq.ladder.plan import MAX_DELAY_MS
from rabbitq.outcome import DeadLetter, Retry
from rabbitq.retry import EXHAUSTED, PERMANENT, after_exception, after_retry_later
from rabbitq.testing import deliver

POLICY = RetryPolicy(delays=(1, 10, 60, 600))


@pytest.mark.parametrize(
    ("seconds", "wanted_ms"),
    [(0, 125), (0.1, 125), (0.5, 500), (1.001, 1001), (30, 30_000), (3600, 3_600_000)],
)
def test_the_delay_asked_for_is_waited_in_the_ladder_at_least_one_unit(
    seconds: float, wanted_ms: int
) -> None:
    decision = after_retry_later(POLICY, 2, RetryLater(seconds))
    assert decision == Retry(wanted_ms, 2, deferred=True, ladder=True)
    assert decision.label == "ladder"  # a bounded metrics label, whatever the delay


def test_a_delay_past_the_ladder_waits_its_longest() -> None:
    decision = after_retry_later(POLICY, 1, RetryLater(10**9))
    assert decision == Retry(MAX_DELAY_MS, 1, deferred=True, ladder=True)


def test_the_attempt_is_not_used_up_even_on_the_last_one() -> None:
    assert after_retry_later(POLICY, 5, RetryLater(10)) == Retry(
        10_000, 5, deferred=True, ladder=True
    )


def test_count_attempt_uses_one_up_and_dead_letters_when_none_is_left() -> None:
    assert after_retry_later(POLICY, 2, RetryLater(10, count_attempt=True)) == Retry(
        10_000, 3, deferred=True, ladder=True
    )
    assert after_retry_later(POLICY, 5, RetryLater(10, count_attempt=True)) == DeadLetter(EXHAUSTED)


def test_a_handler_without_tiers_still_waits_unless_it_counts_the_attempt() -> None:
    none = RetryPolicy(delays=())
    assert after_retry_later(none, 1, RetryLater(1)) == Retry(1000, 1, deferred=True, ladder=True)
    assert after_retry_later(none, 1, RetryLater(1, count_attempt=True)) == DeadLetter(EXHAUSTED)


def test_after_exception_tells_the_three_apart() -> None:
    assert after_exception(POLICY, 1, RetryLater(5)) == Retry(5_000, 1, deferred=True, ladder=True)
    assert after_exception(POLICY, 1, PermanentError("no")) == DeadLetter(PERMANENT)
    assert after_exception(POLICY, 1, ValueError("x")) == Retry(1_000, 2)


@pytest.mark.parametrize("bad", [-1, float("inf"), float("nan"), True, "5"])
def test_retry_later_refuses_a_bad_delay(bad: object) -> None:
    with pytest.raises(ValueError):
        RetryLater(bad)  # type: ignore[arg-type]


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert RetryLater.from_retry_after("30").seconds == 30
    assert RetryLater.from_retry_after(" 7 ", count_attempt=True).count_attempt
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    assert 110 < RetryLater.from_retry_after(when).seconds <= 120
    past = format_datetime(datetime.now(UTC) - timedelta(hours=1), usegmt=True)
    assert RetryLater.from_retry_after(past).seconds == 0
    assert RetryLater.from_retry_after("soon", default=5).seconds == 5


def test_retry_later_reads_well_in_the_error_header() -> None:
    assert str(RetryLater(30)) == "retry after 30s"


# -- through rabbitq.testing: the worker's own dispatch --------------------------------


class Charge(Message, type="retry-later.charge"):
    amount: int


def _provider_app(error: Exception) -> App:
    app = App(queue="retry-later-test", retry=POLICY)

    @app.handler(Charge)
    async def charge(msg: Charge) -> None:
        raise error

    return app


async def test_a_handler_told_to_wait_is_retried_after_the_delay_it_asked_for() -> None:
    result = await deliver(_provider_app(RetryLater(30)), Charge(amount=1), attempt=2)
    assert result.retried and result.deferred
    assert (result.delay, result.tier, result.next_attempt) == ("30s", None, 2)
    assert result.error == "RetryLater: retry after 30s"
    result = await deliver(_provider_app(RetryLater(1.3)), Charge(amount=1))
    assert result.delay == "1375ms"  # rounded up to the ladder's 125 ms


async def test_retry_after_from_a_provider_on_the_last_attempt_is_not_dead_lettered() -> None:
    result = await deliver(
        _provider_app(RetryLater.from_retry_after("5")), Charge(amount=1), attempt=5
    )
    assert result.retried and (result.delay, result.next_attempt) == ("5s", 5)


async def test_counting_the_attempt_on_the_last_one_dead_letters() -> None:
    app = _provider_app(RetryLater(5, count_attempt=True))
    result = await deliver(app, Charge(amount=1), attempt=5)
    assert result.dead_lettered and result.reason == "exhausted"


async def test_an_ordinary_failure_still_uses_an_attempt_and_its_own_tier() -> None:
    result = await deliver(_provider_app(OSError("down")), Charge(amount=1), attempt=2)
    assert result.retried and not result.deferred
    assert (result.delay, result.tier, result.next_attempt) == ("10s", 2, 3)


def test_the_circuit_breaker_counts_a_retry_later_as_a_failure() -> None:
    # So a Breaker on the handler is its backoff: a run of "later" opens the circuit.
    from rabbitq import Breaker
    from rabbitq.breaker import OPEN, Circuit, verdict

    decision = after_exception(POLICY, 1, RetryLater(30))
    assert verdict(decision) is False
    circuit = Circuit(Breaker(min_calls=3, window=3))
    for t in range(3):
        circuit.record(verdict(decision), float(t))
    assert circuit.state == OPEN
