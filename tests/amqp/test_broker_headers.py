"""Copies never carry the broker's ``x-`` headers; its history is kept, bounded and
validated, in ``rabbitq-deaths`` (issue 11, loss paths 1 and 2)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rabbitq._amqp import headers as h
from rabbitq._amqp.copy import replay_headers

WHEN = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
DELIVERY_LIMIT = {
    "queue": "emails",
    "reason": "delivery_limit",
    "count": 1,
    "time": WHEN,
    "exchange": "",
    "routing-keys": ["emails"],
}
BROKER = {
    "x-death": [DELIVERY_LIMIT],
    "x-first-death-queue": "emails",
    "x-first-death-reason": "delivery_limit",
    "x-last-death-queue": "emails",
    "x-delivery-count": 11,
    "X-Custom": "upper case is the broker's too",
}


def copies(headers):
    retry = h.retry_headers(headers, next_attempt=2, error="e", exchange="x", routing_key="k")
    dead = h.dead_letter_headers(
        headers,
        reason="exhausted",
        error="e",
        traceback=None,
        queue="q",
        attempt=3,
        exchange="x",
        routing_key="k",
    )
    return {"retry": retry, "dlq": dead, "replay": replay_headers(headers)}


@pytest.mark.parametrize("kind", ["retry", "dlq", "replay"])
def test_no_copy_carries_a_header_in_the_brokers_namespace(kind):
    out = copies({**BROKER, "tenant": "acme"})[kind]
    assert not [k for k in out if k.lower().startswith("x-")]
    assert out["tenant"] == "acme"


@pytest.mark.parametrize("kind", ["retry", "dlq", "replay"])
def test_every_copy_keeps_the_brokers_history_as_rabbitq_deaths(kind):
    out = copies(BROKER)[kind]
    assert out[h.DEATHS] == [
        {"queue": "emails", "reason": "delivery_limit", "count": 1, "time": WHEN}
    ]


@pytest.mark.parametrize(
    "garbage",
    [["garbage"], "garbage", [1, None], [{"queue": "q"}], [{"reason": "r"}], [[{"q": 1}]], {}],
)
def test_a_malformed_x_death_is_left_out_and_never_forwarded(garbage):
    for out in copies({"x-death": garbage, h.DEATHS: garbage}).values():
        assert "x-death" not in out
        assert h.DEATHS not in out


def test_the_history_merges_the_new_deaths_with_the_recorded_ones_most_recent_first():
    headers = {
        "x-death": [{"queue": "q.retry.1s", "reason": "expired", "count": 1}],
        h.DEATHS: [
            {"queue": "q.retry.1s", "reason": "expired", "count": 2},
            {"queue": "q", "reason": "delivery_limit", "count": 1},
        ],
    }
    assert h.deaths(headers) == [
        {"queue": "q.retry.1s", "reason": "expired", "count": 3},
        {"queue": "q", "reason": "delivery_limit", "count": 1},
    ]


def test_the_history_is_bounded_in_entries_and_text():
    many = [{"queue": f"q{i}" + "n" * 400, "reason": "expired", "count": 1} for i in range(50)]
    history = h.deaths({"x-death": many})
    assert len(history) == h.MAX_DEATHS
    assert all(len(e["queue"].encode()) <= 255 for e in history)


def test_a_count_that_is_not_a_positive_integer_counts_as_one():
    for count in (0, -3, True, "7", 2.5, None):
        assert h.deaths({"x-death": [{"queue": "q", "reason": "r", "count": count}]})[0][
            "count"
        ] == 1
