"""The delay ladder as data (rabbitq.ladder.plan): units, bits, keys, hops, names,
arguments and the checks on delay= / at=. No broker."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rabbitq import DelayError
from rabbitq._amqp.topology import plan as topology_plan
from rabbitq.ladder import plan

NOW = datetime(2026, 3, 29, 0, 59, 59, 999_999, tzinfo=UTC)
UNIT = Fraction(plan.UNIT_MS, 1000)


def topic_matches(pattern: str, key: str) -> bool:
    """RabbitMQ's topic matching of the ladder's patterns (``*`` one word, ``#`` any)."""
    regex = pattern.replace(".", r"\.").replace("*", r"[^.]+").replace(r"\.#", r"(\..*)?")
    return re.fullmatch(regex, key) is not None


def walk(queue_type: str, exchange: str, key: str) -> list[str]:
    """Where a message published to ``exchange`` with ``key`` waits, hop by hop, until
    it reaches the delivering exchange: the ladder's bindings, followed as the broker
    would (a queue dead-letters to its x-dead-letter-exchange, keeping the key)."""
    ladder = plan.ladder(queue_type)  # type: ignore[arg-type]
    arguments = {level.name: level.arguments for level in ladder.levels}
    waited: list[str] = []
    while exchange != plan.DELIVER_EXCHANGE:
        routes = [b for b in ladder.bindings if b.source == exchange]
        matched = [b for b in routes if topic_matches(b.routing_key, key)]
        assert len(matched) == 1, (exchange, key, matched)
        if matched[0].to_exchange:
            exchange = matched[0].destination
        else:
            waited.append(matched[0].destination)
            exchange = arguments[matched[0].destination]["x-dead-letter-exchange"]
    return waited


seconds = st.floats(min_value=0, max_value=plan.MAX_DELAY_MS / 1000, allow_nan=False)


@given(seconds)
def test_the_hops_of_any_delay_add_up_to_at_least_it_and_less_than_one_unit_more(delay):
    units, _ = plan.due_in(delay=delay, now=NOW)
    waited = sum(plan.level_ttl_ms(level) for level in plan.hops(units))
    assert Fraction(delay) <= Fraction(waited, 1000) < Fraction(delay) + UNIT


@given(st.integers(min_value=0, max_value=plan.MAX_UNITS), st.sampled_from(["quorum", "classic"]))
def test_the_bindings_carry_a_message_through_exactly_the_levels_of_its_set_bits(units, kind):
    exchange, key = plan.entry(kind, units)
    levels = [plan.level_name(kind, level) for level in plan.hops(units)]
    assert walk(kind, exchange, key) == levels
    assert len(levels) == bin(units).count("1") <= plan.LEVELS


@given(st.integers(min_value=0, max_value=plan.MAX_UNITS))
def test_a_routing_key_is_the_bits_least_significant_first(units):
    key = plan.routing_key(units)
    assert plan.is_ladder_key(key)
    assert int("".join(reversed(key.split("."))), 2) == units


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_a_time_is_rounded_up_to_whole_units_never_down(micros):
    at = NOW + timedelta(microseconds=micros)
    if micros > plan.MAX_DELAY_MS * 1000:
        with pytest.raises(DelayError, match="longer than the delay ladder holds"):
            plan.due_in(at=at, now=NOW)
        return
    units, due = plan.due_in(at=at, now=NOW)
    waited = units * plan.UNIT_MS * 1000
    if micros <= 0:
        assert units == 0 and due == NOW  # the past is now
    else:
        assert micros <= waited < micros + plan.UNIT_MS * 1000 and due == at


def test_the_ladder_holds_thirty_days_in_at_most_25_hops_at_125_ms():
    assert plan.MAX_DELAY > timedelta(days=48)
    thirty_days, _ = plan.due_in(delay=timedelta(days=30), now=NOW)
    assert len(plan.hops(thirty_days)) <= plan.LEVELS == 25
    assert plan.level_ttl_ms(24) == 2_097_152_000 < 2**31  # a signed 32-bit TTL
    assert plan.due_in(delay=0.375, now=NOW)[0] == 3
    assert plan.due_in(delay=0.1, now=NOW)[0] == 1
    assert plan.due_in(delay=0, now=NOW)[0] == 0


def test_names_are_shared_per_queue_type_and_keep_their_key():
    ladder = plan.ladder("quorum")
    assert ladder.exchanges[0] == "rabbitq.delay.quorum.00"
    assert ladder.exchanges[-1] == "rabbitq.delay.quorum.24"
    level3 = ladder.levels[3].arguments
    assert level3 == {
        "x-message-ttl": 1000,
        "x-dead-letter-exchange": "rabbitq.delay.quorum.02",
        "x-queue-type": "quorum",
        "x-delivery-limit": plan.DELIVERY_LIMIT,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }
    assert "x-dead-letter-routing-key" not in level3
    assert plan.ladder("classic").levels[0].arguments == {
        "x-message-ttl": 125,
        "x-dead-letter-exchange": plan.DELIVER_EXCHANGE,
    }
    assert plan.is_ladder_queue("rabbitq.delay.classic.07")
    assert not plan.is_ladder_queue("emails.retry.1s")


def test_an_apps_topology_binds_its_queue_to_the_delivering_exchange_on_its_name_only():
    topology = topology_plan(
        queue="emails", exchange="rabbitq", delays_ms=(), routing_keys=(), queue_type="classic"
    )
    assert topology.ladder.queue_type == "classic"
    assert plan.destination_arguments("emails") == {"x-match": "all", plan.DELAY_TO: "emails"}
    assert topology.queues == (topology.main, topology.dlq)  # the ladder is not the app's


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({}, "give delay= or at="),
        ({"delay": 1, "at": NOW}, "not both"),
        ({"at": datetime(2026, 1, 1)}, "naive datetime"),
        ({"at": "2026-01-01T00:00:00+00:00"}, "must be a datetime, not str"),
        ({"delay": -0.001}, "0 or more"),
        ({"delay": float("inf")}, "finite"),
        ({"delay": True}, "seconds or a timedelta"),
        ({"delay": timedelta(seconds=-1)}, "0 or more"),
        ({"delay": plan.MAX_DELAY_MS / 1000 + 0.001}, "longer than the delay ladder holds"),
        ({"delay": 1e300}, "longer than the delay ladder holds"),
    ],
)
def test_impossible_delays_and_times_are_one_line_errors(kwargs, says):
    with pytest.raises(DelayError, match=says) as caught:
        plan.due_in(now=NOW, **kwargs)
    assert "\n" not in str(caught.value)


def test_the_longest_delay_and_an_aware_time_in_any_zone_are_accepted():
    assert plan.due_in(delay=plan.MAX_DELAY, now=NOW)[0] == plan.MAX_UNITS
    berlin = timezone(timedelta(hours=2))
    units, due = plan.due_in(at=datetime(2026, 3, 29, 3, 0, 1, tzinfo=berlin), now=NOW)
    assert units == 9 and due.astimezone(UTC) == NOW + timedelta(seconds=1, microseconds=1)
    assert plan.due_header(due) == "2026-03-29T01:00:01.000000+00:00"
