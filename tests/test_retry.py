"""The retry policy and the pure decision after a failed attempt."""

from __future__ import annotations

import dataclasses
import decimal

import pytest

from rabbitq import ConfigurationError, RetryPolicy
from rabbitq.outcome import DeadLetter, Retry
from rabbitq.retry import EXHAUSTED, PERMANENT, REASONS, after_failure, parse_attempt


def test_the_default_policy_tries_five_times_over_one_second_to_ten_minutes():
    policy = RetryPolicy()
    assert policy.delays == (1, 10, 60, 600)
    assert policy.attempts == 5
    assert policy.delays_ms == (1_000, 10_000, 60_000, 600_000)


def test_a_policy_without_delays_tries_once():
    assert RetryPolicy(delays=()).attempts == 1


def test_a_list_of_delays_is_kept_as_a_tuple():
    policy = RetryPolicy(delays=[0.5, 2])  # type: ignore[arg-type]
    assert policy.delays == (0.5, 2)
    assert policy.delays_ms == (500, 2_000)
    assert hash(policy) == hash(RetryPolicy(delays=(0.5, 2)))


def test_a_policy_is_frozen_and_keyword_only():
    policy = RetryPolicy(delays=(1,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.delays = (2,)  # type: ignore[misc]
    with pytest.raises(TypeError):
        RetryPolicy((1,))  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "delays",
    [(0,), (-1,), (1, 0.0005), (0.0015,), (float("nan"),), ("10",), (None,)],
)
def test_a_policy_with_an_impossible_delay_is_a_configuration_error(delays):
    with pytest.raises(ConfigurationError, match="retry delay"):
        RetryPolicy(delays=delays)


@pytest.mark.parametrize("delays", ["10", b"10", 10, None, {1, 2}])
def test_delays_that_are_not_a_sequence_are_a_configuration_error(delays):
    with pytest.raises(ConfigurationError, match="delays must be a tuple"):
        RetryPolicy(delays=delays)


def test_each_failure_waits_in_the_next_tier_until_delays_run_out():
    policy = RetryPolicy(delays=(1, 10, 60))
    assert after_failure(policy, 1, permanent=False) == Retry(1_000, 2)
    assert after_failure(policy, 2, permanent=False) == Retry(10_000, 3)
    assert after_failure(policy, 3, permanent=False) == Retry(60_000, 4)
    assert after_failure(policy, 4, permanent=False) == DeadLetter(EXHAUSTED)
    assert after_failure(policy, 1_000_000, permanent=False) == DeadLetter(EXHAUSTED)


def test_every_attempt_of_the_default_policy_is_decided():
    policy = RetryPolicy()
    decisions = [after_failure(policy, n, permanent=False) for n in range(1, 7)]
    assert [d.label if isinstance(d, Retry) else d.reason for d in decisions] == [
        "1s",
        "10s",
        "1m",
        "10m",
        EXHAUSTED,
        EXHAUSTED,
    ]
    assert [d.next_attempt for d in decisions if isinstance(d, Retry)] == [2, 3, 4, 5]


def test_a_permanent_failure_is_dead_lettered_at_any_attempt():
    policy = RetryPolicy()
    for attempt in range(1, 7):
        assert after_failure(policy, attempt, permanent=True) == DeadLetter(PERMANENT)


def test_a_single_attempt_policy_dead_letters_the_first_failure():
    assert after_failure(RetryPolicy(delays=()), 1, permanent=False) == DeadLetter(EXHAUSTED)


def test_a_retry_is_labelled_like_its_queue():
    assert Retry(500, 2).label == "500ms"
    assert Retry(90_000, 2).label == "90s"
    assert Retry(3_600_000, 2).label == "1h"


def test_the_dead_letter_reasons_are_the_documented_ones():
    assert REASONS == ("exhausted", "permanent", "invalid", "unknown-type")


@pytest.mark.parametrize(
    ("value", "attempt"),
    [
        (None, 1),
        (1, 1),
        (3, 3),
        ("3", 3),
        (" 4 ", 4),
        (b"2", 2),
        (-5, 1),
        ("-5", 1),
        (0, 1),
        ("0", 1),
        (True, 1),
        (False, 1),
        (10**20, 1_000_000),
        ("abc", 1),
        ("", 1),
        (b"\xff\xfe", 1),
        (bytearray(b"3"), 3),
        (-(2**63), 1),
        (decimal.Decimal("3"), 1),
        (1.5, 1),
        (2.0, 1),
        (float("nan"), 1),
        ({"nested": 1}, 1),
        ([1], 1),
        ("99999999999", 1_000_000),
        ("²", 1),
        ("3\x00", 1),
    ],
)
def test_parse_attempt_reads_any_header_value_as_a_positive_attempt(value, attempt):
    assert parse_attempt(value) == attempt
