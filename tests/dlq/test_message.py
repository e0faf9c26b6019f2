"""What rabbitq decides about a dead message without a broker: reason, origin, time,
filters, and the headers of a replayed copy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rabbitq._amqp import headers as h
from rabbitq._amqp.copy import replay as replay_copy
from rabbitq._amqp.copy import replay_headers
from rabbitq.dlq import DeadMessage, Filters
from rabbitq.dlq.message import origin_of, parse_when, reason_of, resolve_dlq
from rabbitq.errors import DlqError

DEATH = {"reason": "delivery_limit", "queue": "emails", "time": datetime(2024, 5, 1, tzinfo=UTC)}


def message(**headers: object) -> DeadMessage:
    return DeadMessage(
        dlq="emails.dlq",
        body=b"{}",
        properties={"message_id": "m1", "type": "email.send"},
        headers=dict(headers),
    )


def test_a_queue_name_resolves_to_its_dlq_and_a_dlq_name_to_itself():
    assert resolve_dlq("emails") == "emails.dlq"
    assert resolve_dlq("emails.dlq") == "emails.dlq"


def test_the_reason_is_rabbitqs_own_else_the_brokers_x_death_reason():
    assert reason_of({h.REASON: "exhausted", "x-death": [DEATH]}) == "exhausted"
    assert reason_of({"x-death": [DEATH]}) == "broker:delivery_limit"
    assert reason_of({}) == ""


def test_the_origin_is_rabbitq_queue_else_x_death_queue_else_the_dlq_name():
    assert origin_of({h.QUEUE: "a"}, "b.dlq") == "a"
    assert origin_of({"x-death": [DEATH]}, "b.dlq") == "emails"
    assert origin_of({}, "b.dlq") == "b"
    assert origin_of({}, "plain") is None


def test_failed_at_comes_from_the_header_then_x_death_then_the_timestamp():
    assert message(**{h.FAILED_AT: "2024-05-02T00:00:00.000+00:00"}).failed_at == datetime(
        2024, 5, 2, tzinfo=UTC
    )
    assert message(**{"x-death": [DEATH]}).failed_at == DEATH["time"]
    assert message(**{h.FAILED_AT: "garbage"}).failed_at is None


def test_replay_headers_reset_the_attempt_count_the_replay_and_drop_dlq_only_ones():
    dlq_headers = h.dead_letter_headers(
        {"tenant": "acme", h.REPLAYED: 2, "x-delivery-count": 3},
        reason="exhausted",
        error="E: x",
        traceback="tb",
        queue="emails",
        attempt=5,
        exchange="rabbitq",
        routing_key="email.send",
    )
    out = replay_headers(dlq_headers)
    assert out[h.REPLAYED] == 3
    assert h.ATTEMPT not in out and "x-delivery-count" not in out
    assert not set(h.DLQ_ONLY) & set(out)
    assert out["tenant"] == "acme" and out[h.ORIGINAL_EXCHANGE] == "rabbitq"
    assert replay_headers({h.REPLAYED: "not a number"})[h.REPLAYED] == 1


def test_a_replay_copy_keeps_body_and_properties_but_only_our_own_user_id():
    m = DeadMessage(
        dlq="emails.dlq",
        body=b"\x00body",
        properties={
            "message_id": "m1",
            "type": "t",
            "correlation_id": "c",
            "priority": 3,
            "delivery_mode": 2,
            "expiration": "60000",
            "user_id": "alice",
        },
        headers={},
    )
    copy = replay_copy(m, user="guest")
    p = copy.properties
    assert (copy.body, p.message_id, p.message_type, p.correlation_id) == (
        b"\x00body",
        "m1",
        "t",
        "c",
    )
    assert p.priority == 3 and p.expiration == "60000"
    assert p.user_id is None  # the broker would refuse another user's id
    assert replay_copy(m, user="alice").properties.user_id == "alice"


def test_a_message_without_message_id_is_replayed_with_the_workers_derived_id():
    m = DeadMessage(dlq="q.dlq", body=b"x", properties={"type": "t"}, headers={})
    assert replay_copy(m).properties.message_id == replay_copy(m).properties.message_id
    assert (replay_copy(m).properties.message_id or "").startswith("derived-")


def test_every_filter_must_hold_and_repeated_values_are_alternatives():
    m = message(**{h.REASON: "exhausted", h.ERROR: "SMTPError: 550 full"})
    assert Filters().matches(m)
    assert Filters.build(types=["email.send", "sms.send"], reasons=["exhausted"]).matches(m)
    assert not Filters.build(types=["email.send"], reasons=["permanent"]).matches(m)
    assert Filters.build(grep=r"550").matches(m)
    assert not Filters.build(grep=r"^550").matches(m)
    assert not Filters.build(message_ids=["m2"]).matches(m)
    assert not Filters.build(grep="x").matches(message())  # no error text: no match


def test_time_filters_are_half_open_and_exclude_messages_without_a_time():
    when = datetime(2024, 5, 1, 12, tzinfo=UTC)
    m = message(**{h.FAILED_AT: when.isoformat()})
    assert Filters(since=when).matches(m)
    assert not Filters(until=when).matches(m)
    assert not Filters(since=when - timedelta(days=1)).matches(message())


def test_times_are_iso_dates_or_ages():
    now = datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert parse_when("2h", now=now) == now - timedelta(hours=2)
    assert parse_when("2024-05-01") == datetime(2024, 5, 1, tzinfo=UTC)
    assert parse_when("2024-05-01T10:00:00Z") == datetime(2024, 5, 1, 10, tzinfo=UTC)
    with pytest.raises(DlqError, match="cannot read the time 'yesterday'"):
        parse_when("yesterday")


def test_a_bad_regex_is_a_clear_error():
    with pytest.raises(DlqError, match="not a valid regular expression"):
        Filters.build(grep="(")


def test_filters_describe_themselves_for_the_operator():
    filters = Filters.build(types=["b", "a"], reasons=["exhausted"], grep="550")
    assert filters.describe() == "type a or b, reason exhausted, error matching /550/"
    assert not Filters().active and Filters().describe() == ""
