"""The publisher's pure parts: the backoff of ``retry_for`` and its validation."""

from __future__ import annotations

import itertools

import pytest

from rabbitq import App, ConfigurationError
from rabbitq._amqp.confirm import RETRY_MAX_WAIT, retry_waits
from rabbitq._amqp.pipeline import key_function


def test_retry_waits_double_from_a_tenth_of_a_second_up_to_a_cap():
    waits = list(itertools.islice(retry_waits(), 7))
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, RETRY_MAX_WAIT, RETRY_MAX_WAIT]


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_retry_for_must_be_positive_seconds(bad):
    with pytest.raises(ConfigurationError, match="retry_for must be positive seconds"):
        App(queue="unit-publisher").publisher(retry_for=bad)


def test_retry_for_none_means_fail_at_once():
    assert App(queue="unit-publisher").publisher()._retry_for is None


def test_publish_many_s_unique_key_is_a_function_given_with_unique_for() -> None:
    def key(msg: object) -> str:
        return "k"

    assert key_function(None, None) is None and key_function(60, key) is key
    for unique_for, unique_key in ((60, None), (None, key), (60, "one-for-all"), (60, 3)):
        with pytest.raises(ConfigurationError, match="unique_key"):
            key_function(unique_for, unique_key)  # type: ignore[arg-type]
