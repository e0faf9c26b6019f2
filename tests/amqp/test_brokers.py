"""The version table: each RabbitMQ series' facts, as data."""

from __future__ import annotations

import logging

import pytest

from rabbitq._amqp.brokers import (
    BrokerVersion,
    describe,
    facts_for,
    log_broker,
    version_from_server_properties,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3.10.8", BrokerVersion(3, 10, 8)),
        (b"4.0.5", BrokerVersion(4, 0, 5)),
        ("4.3.0-rc.1", BrokerVersion(4, 3, 0)),
        ("4.1", BrokerVersion(4, 1, 0)),
        ("garbage", None),
        (None, None),
        (42, None),
    ],
)
def test_versions_are_parsed_from_what_the_broker_announces(text, expected):
    assert BrokerVersion.parse(text) == expected


def test_the_version_comes_from_the_server_properties_of_rabbitmq_only():
    props = {"product": b"RabbitMQ", "version": b"3.10.8"}
    assert version_from_server_properties(props) == BrokerVersion(3, 10, 8)
    assert version_from_server_properties({"product": "LavinMQ", "version": "1.2.3"}) is None
    assert version_from_server_properties({}) is None
    assert version_from_server_properties(None) is None


@pytest.mark.parametrize(
    ("version", "series"),
    [("3.10.8", "3.x"), ("3.13.7", "3.x"), ("4.0.0", "4.0-4.2"), ("4.2.3", "4.0-4.2"),
     ("4.3.0", "4.3+"), ("4.4.1", "4.3+")],
)  # fmt: skip
def test_each_version_belongs_to_one_behaviour_series(version, series):
    assert BrokerVersion.parse(version).series == series
    assert facts_for(BrokerVersion.parse(version)).series == series


def test_on_3_10_quorum_queues_have_no_default_limit_and_0_or_minus_1_drop_at_once():
    facts = facts_for(BrokerVersion(3, 10, 8))
    assert facts.default_delivery_limit is None
    assert facts.limit_below_one_drops and facts.unlimited_argument is None
    assert "returns" in facts.delivery_count_counts and facts.reads_count_toward_limit
    assert facts.consumer_timeout_action == "channel close"
    assert not facts.broker_owns_x_headers and not facts.native_delayed_retry
    assert facts.measured


def test_3_13_owns_x_headers_but_keeps_3_x_delivery_counting():
    facts = facts_for(BrokerVersion(3, 13, 1))
    assert facts.broker_owns_x_headers and facts.default_delivery_limit is None
    assert not facts.measured


def test_4_0_to_4_2_default_to_a_limit_of_20_that_returns_spend():
    facts = facts_for(BrokerVersion(4, 1, 0))
    assert facts.default_delivery_limit == 20 and facts.unlimited_argument == -1
    assert "returns" in facts.delivery_count_counts
    assert not facts.limit_below_one_drops and facts.broker_owns_x_headers


def test_4_3_counts_channel_closes_not_nacks_and_cancels_timed_out_consumers():
    facts = facts_for(BrokerVersion(4, 3, 2))
    assert facts.delivery_count_counts == ("channel closes", "rejects with requeue")
    assert facts.reads_count_toward_limit  # dlq list closes its channel
    assert facts.consumer_timeout_action == "basic.cancel"
    assert facts.native_delayed_retry and facts.default_delivery_limit == 20


def test_an_unknown_version_is_assumed_to_have_the_4_x_default_limit():
    facts = facts_for(None)
    assert facts.default_delivery_limit == 20 and not facts.measured
    assert "version unknown" in describe(facts)[0]


def test_a_version_newer_than_the_table_is_said_to_be_assumed():
    lines = describe(facts_for(BrokerVersion(5, 0, 0)))
    assert any("assuming" in line for line in lines)
    assert "documentation" in lines[0]


def test_the_description_of_3_10_says_what_0_and_minus_1_do():
    lines = describe(facts_for(BrokerVersion(3, 10, 8)))
    assert lines[0] == "RabbitMQ 3.10.8: 3.x behaviour"
    assert any("0 or -1 (rabbitq never sets one) would drop" in line for line in lines)


def test_log_broker_reads_the_version_from_an_aio_pika_connection(caplog):
    class Underlying:
        server_properties = {"product": b"RabbitMQ", "version": b"4.2.1"}

    class Transport:
        connection = Underlying()

    class Connection:
        transport = Transport()

    with caplog.at_level(logging.DEBUG, logger="rabbitq.worker"):
        facts = log_broker(Connection())
    assert facts.version == BrokerVersion(4, 2, 1)
    assert "RabbitMQ 4.2.1: 4.0-4.2 behaviour" in caplog.text
    assert log_broker(object()).version is None  # not connected: unknown, no crash


def test_every_x_header_belongs_to_the_broker_and_rabbitqs_own_do_not():
    from rabbitq._amqp.brokers import BROKER_HEADERS, broker_owned

    assert all(broker_owned(h) for h in BROKER_HEADERS)
    assert broker_owned("X-Custom-Thing")
    assert not broker_owned("rabbitq-attempt") and not broker_owned("traceparent")


# -- RabbitMQ 4.3, from recorded server properties (no 4.3 broker runs here) --------


def test_recorded_server_properties_give_each_series_its_facts():
    from tests.server_properties import RABBITMQ_3_10_8, RABBITMQ_4_3_0

    old = facts_for(version_from_server_properties(RABBITMQ_3_10_8))
    new = facts_for(version_from_server_properties(RABBITMQ_4_3_0))
    assert old.measured and old.nack_counts and not old.per_consumer_timeout
    assert not (old.global_qos_refused or old.transient_queues_refused or old.queue_mode_refused)
    assert new.series == "4.3+" and not new.measured
    assert not new.nack_counts and "rejects with requeue" in new.delivery_count_counts
    assert new.consumer_timeout_queue_types == ("quorum",) and new.per_consumer_timeout
    assert new.global_qos_refused and new.transient_queues_refused and new.queue_mode_refused
    assert "0-31" in new.quorum_priorities


def test_4_3_is_described_with_what_nack_and_reject_do_and_where_timeouts_apply():
    from tests.server_properties import RABBITMQ_4_3_0

    lines = describe(facts_for(version_from_server_properties(RABBITMQ_4_3_0)))
    assert any("basic.nack" in line and "basic.reject does" in line for line in lines)
    assert "consumer_timeout applies to quorum queues only" in lines
    assert not any("basic.nack" in line for line in describe(facts_for(BrokerVersion(3, 10, 8))))


def test_every_fact_says_whether_it_was_verified_here_and_which_docs_it_rests_on():
    from rabbitq._amqp.brokers import FACT_ROWS

    assert len({row.fact for row in FACT_ROWS}) == len(FACT_ROWS)
    for row in FACT_ROWS:
        assert row.verified and row.docs and all(row.values), row.fact
        assert row.verified.startswith(("yes", "no", "accepted")), row.fact


def test_the_docs_table_of_broker_facts_is_generated_from_the_module():
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("reliability", root / "scripts/reliability.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    docs = (root / "docs/reliability.md").read_text()
    assert script.render_broker_facts() in docs, "run scripts/reliability.py --broker-facts"


# -- RabbitMQ 4.4, from its documentation (no 4.4 broker runs here) -------------------


def test_4_4_quorum_queues_delay_natively_and_4_3_do_not():
    new, old = facts_for(BrokerVersion(4, 4, 1)), facts_for(BrokerVersion(4, 3, 2))
    assert new.native_delayed_delivery and not old.native_delayed_delivery
    assert not facts_for(None).native_delayed_delivery
    assert new.series == "4.3+" and not new.measured  # decides as 4.3 does otherwise
    assert new.default_delivery_limit == 20 and "0-31" in new.quorum_priorities


def test_4_4_is_known_and_described_with_its_delay_that_rabbitq_does_not_use():
    lines = describe(facts_for(BrokerVersion(4, 4, 0)))
    assert any("x-opt-delivery-time" in line and "do not use it" in line for line in lines)
    assert not any("assuming" in line for line in lines)
    assert not any("x-opt-delivery-time" in line for line in describe(facts_for(None)))


def test_every_row_has_a_4_4_value_and_the_changed_ones_say_what_changed():
    from rabbitq._amqp.brokers import FACT_ROWS
    from rabbitq._amqp.fact_rows import COLUMNS, SAME_AS_4_3

    assert COLUMNS[-1] == "4.4" and len(COLUMNS) == len(FACT_ROWS[0].values) + 1
    changed = {row.fact: row.in_4_4 for row in FACT_ROWS if row.in_4_4 != SAME_AS_4_3}
    delay = next(value for fact, value in changed.items() if "native delayed" in fact)
    assert "x-opt-delivery-time" in delay and "AMQP 1.0" in delay
    assert all(row.in_4_4 for row in FACT_ROWS)
