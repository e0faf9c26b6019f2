"""Queue names and arguments are pure data: checked here exactly as docs/contract.md lists them."""

from __future__ import annotations

import aiormq
import pytest

from rabbitq import ConfigurationError, TopologyMismatch
from rabbitq._amqp.topology import (
    DEFAULT_DELIVERY_LIMIT,
    delay_label,
    delay_ms,
    dlq_name,
    mismatch_from_error,
    plan,
    retry_queue_name,
)


@pytest.mark.parametrize(
    ("ms", "label"),
    [
        (1, "1ms"),
        (500, "500ms"),
        (1_000, "1s"),
        (1_500, "1500ms"),
        (10_000, "10s"),
        (61_000, "61s"),
        (90_000, "90s"),
        (60_000, "1m"),
        (120_000, "2m"),
        (600_000, "10m"),
        (5_400_000, "90m"),
        (3_600_000, "1h"),
        (86_400_000, "24h"),
        (3_601_000, "3601s"),
    ],
)
def test_delay_label_uses_the_largest_unit_that_divides_the_delay(ms, label):
    assert delay_label(ms) == label


@pytest.mark.parametrize(
    ("seconds", "ms"),
    [(1, 1000), (0.5, 500), (1.5, 1500), (0.001, 1), (0.2, 200), (0.3, 300), (600, 600_000)],
)
def test_delay_ms_turns_seconds_into_whole_milliseconds(seconds, ms):
    assert delay_ms(seconds) == ms
    assert isinstance(delay_ms(seconds), int)


@pytest.mark.parametrize(
    "seconds",
    [0, 0.0, -1, -0.5, 0.0005, 0.0015, 1.0001, 1e-7, float("nan"), float("inf"), "1", None, True],
)
def test_delay_ms_rejects_what_is_not_a_positive_whole_number_of_milliseconds(seconds):
    with pytest.raises(ConfigurationError, match="retry delay"):
        delay_ms(seconds)


def test_queue_names_follow_the_documented_pattern():
    assert retry_queue_name("emails", 10_000) == "emails.retry.10s"
    assert retry_queue_name("emails", 500) == "emails.retry.500ms"
    assert dlq_name("emails") == "emails.dlq"


def test_a_classic_plan_has_exactly_the_documented_arguments():
    topology = plan(
        queue="emails",
        exchange="rabbitq",
        delays_ms=[1_000, 10_000],
        routing_keys=["email.send"],
    )
    assert topology.exchange == "rabbitq"
    assert topology.main.name == "emails"
    assert topology.main.kind == "main"
    assert dict(topology.main.arguments) == {
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "emails.dlq",
    }
    assert [(q.name, q.kind, q.ttl_ms, dict(q.arguments)) for q in topology.retries] == [
        (
            "emails.retry.1s",
            "retry",
            1_000,
            {
                "x-message-ttl": 1_000,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "emails",
            },
        ),
        (
            "emails.retry.10s",
            "retry",
            10_000,
            {
                "x-message-ttl": 10_000,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "emails",
            },
        ),
    ]
    assert topology.dlq.name == "emails.dlq"
    assert topology.dlq.kind == "dlq"
    assert dict(topology.dlq.arguments) == {"x-overflow": "reject-publish"}
    assert topology.routing_keys == ("email.send",)


def test_a_quorum_plan_adds_the_delivery_limit_and_safe_dead_lettering():
    topology = plan(
        queue="payments",
        exchange="rabbitq",
        delays_ms=[1_000],
        routing_keys=["payment.capture"],
        queue_type="quorum",
        delivery_limit=5,
    )
    quorum = {
        "x-queue-type": "quorum",
        "x-delivery-limit": 5,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }
    assert dict(topology.main.arguments) == {
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "payments.dlq",
        **quorum,
    }
    (retry,) = topology.retries
    assert dict(retry.arguments) == {
        "x-message-ttl": 1_000,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "payments",
        **quorum,
    }
    assert dict(topology.dlq.arguments) == {
        "x-queue-type": "quorum",
        "x-delivery-limit": 1_000_000_000,
        "x-overflow": "reject-publish",
    }


def test_a_quorum_plan_uses_the_default_delivery_limit_unless_given():
    topology = plan(queue="q", exchange="x", delays_ms=[], routing_keys=[], queue_type="quorum")
    assert topology.main.arguments["x-delivery-limit"] == DEFAULT_DELIVERY_LIMIT


def test_no_queue_ever_gets_an_expiry():
    for queue_type in ("classic", "quorum"):
        topology = plan(
            queue="q",
            exchange="x",
            delays_ms=[1, 1_000, 3_600_000],
            routing_keys=["a"],
            queue_type=queue_type,
        )
        for spec in topology.queues:
            assert "x-expires" not in spec.arguments


def test_retry_queues_are_sorted_by_delay_and_equal_delays_share_one_queue():
    topology = plan(
        queue="q",
        exchange="x",
        delays_ms=[600_000, 1_000, 60_000, 1_000, 10_000, 60_000],
        routing_keys=[],
    )
    assert [q.name for q in topology.retries] == [
        "q.retry.1s",
        "q.retry.10s",
        "q.retry.1m",
        "q.retry.10m",
    ]
    assert [q.name for q in topology.queues] == [
        "q",
        "q.retry.1s",
        "q.retry.10s",
        "q.retry.1m",
        "q.retry.10m",
        "q.dlq",
    ]


def test_routing_keys_are_sorted_and_deduplicated():
    topology = plan(queue="q", exchange="x", delays_ms=[], routing_keys=["b.two", "a.one", "b.two"])
    assert topology.routing_keys == ("a.one", "b.two")


def test_a_plan_without_delays_has_no_retry_queues():
    topology = plan(queue="q", exchange="x", delays_ms=[], routing_keys=[])
    assert topology.retries == ()
    assert [q.name for q in topology.queues] == ["q", "q.dlq"]


def test_retry_queue_finds_the_queue_of_a_delay():
    topology = plan(queue="q", exchange="x", delays_ms=[1_000, 10_000], routing_keys=[])
    assert topology.retry_queue(10_000).name == "q.retry.10s"


def test_retry_queue_of_an_unknown_delay_names_the_available_ones():
    topology = plan(queue="q", exchange="x", delays_ms=[1_000, 10_000], routing_keys=[])
    with pytest.raises(ConfigurationError, match=r"no retry queue for a delay of 5s.*1s, 10s"):
        topology.retry_queue(5_000)


def test_retry_queue_without_any_retry_queues_says_none():
    topology = plan(queue="q", exchange="x", delays_ms=[], routing_keys=[])
    with pytest.raises(ConfigurationError, match="available: none"):
        topology.retry_queue(1_000)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"queue_type": "stream"}, "queue_type"),
        ({"queue": ""}, "invalid queue name"),
        ({"queue": "amq.reserved"}, "invalid queue name"),
        ({"delivery_limit": 0}, "delivery_limit"),
    ],
)
def test_plan_rejects_a_configuration_that_cannot_be_declared(kwargs, match):
    arguments = {"queue": "q", "exchange": "x", "delays_ms": [], "routing_keys": [], **kwargs}
    with pytest.raises(ConfigurationError, match=match):
        plan(**arguments)


def test_a_queue_argument_mismatch_from_the_broker_becomes_a_topology_mismatch():
    error = aiormq.exceptions.ChannelPreconditionFailed(
        "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q.retry.1s' in "
        "vhost '/': received the value '1000' of type 'signedint' but current is none",
    )
    mismatch = mismatch_from_error(error)
    assert isinstance(mismatch, TopologyMismatch)
    assert mismatch.kind == "queue"
    assert mismatch.name == "q.retry.1s"
    assert mismatch.argument == "x-message-ttl"
    assert mismatch.detail == "received the value 1000 of type signedint but current is none"
    text = str(mismatch)
    assert "'q.retry.1s'" in text
    assert "'x-message-ttl'" in text
    assert "rabbitmqctl delete_queue q.retry.1s" in text


def test_an_exchange_type_mismatch_from_the_broker_becomes_a_topology_mismatch():
    error = Exception(
        "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'rabbitq' in vhost '/': "
        "received 'topic' but current is 'direct'"
    )
    mismatch = mismatch_from_error(error)
    assert mismatch is not None
    assert (mismatch.kind, mismatch.name, mismatch.argument) == ("exchange", "rabbitq", "type")
    assert mismatch.detail == "received topic but current is direct"
    assert "rabbitmqctl" not in str(mismatch)
    assert "delete it" in str(mismatch)


def test_a_mismatch_in_another_vhost_is_still_recognised():
    error = Exception(
        "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'emails' in vhost "
        "'prod': received the value 'quorum' of type 'longstr' but current is none"
    )
    mismatch = mismatch_from_error(error)
    assert mismatch is not None
    assert (mismatch.name, mismatch.argument) == ("emails", "x-queue-type")


@pytest.mark.parametrize(
    "text",
    [
        "PRECONDITION_FAILED - unknown delivery tag 7",
        "NOT_FOUND - no queue 'q' in vhost '/'",
        "",
    ],
)
def test_other_broker_errors_are_not_mistaken_for_a_mismatch(text):
    assert mismatch_from_error(Exception(text)) is None


@pytest.mark.parametrize(
    ("argument", "detail", "existing", "wanted"),
    [
        (
            "x-overflow",
            "received the value 'reject-publish' of type 'longstr' but current is none",
            "classic",
            "quorum",
        ),
        (
            "x-dead-letter-strategy",
            "received none but current is the value 'at-least-once' of type 'longstr'",
            "quorum",
            "classic",
        ),
        (
            "x-queue-type",
            "received the value 'quorum' of type 'longstr' but current is none",
            "classic",
            "quorum",
        ),
    ],
)
def test_a_queue_of_the_other_type_is_named_as_such(argument, detail, existing, wanted):
    error = Exception(
        f"PRECONDITION_FAILED - inequivalent arg '{argument}' for queue 'emails' in vhost '/': "
        f"{detail}"
    )
    text = str(mismatch_from_error(error))
    assert f"queue 'emails' exists as a {existing} queue, the app wants {wanted}" in text
    assert argument not in text
    assert "rabbitmqctl delete_queue emails" in text


@pytest.mark.parametrize(
    ("argument", "value"), [("x-overflow", "reject-publish"), ("x-delivery-limit", "1000000000")]
)
@pytest.mark.parametrize("topology", [None, "plan"])
def test_a_dlq_declared_before_it_had_its_arguments_names_the_argument_and_the_migration(
    argument, value, topology
):
    """Every DLQ has x-overflow, whatever its type, and old quorum DLQs lack
    x-delivery-limit too: neither means "the other queue type" on a DLQ."""
    error = Exception(
        f"PRECONDITION_FAILED - inequivalent arg '{argument}' for queue 'emails.dlq' in vhost "
        f"'/': received the value '{value}' of type 'longstr' but current is none"
    )
    known = plan(queue="emails", exchange="x", delays_ms=(), routing_keys=()) if topology else None
    mismatch = mismatch_from_error(error, known)
    assert mismatch is not None and mismatch.argument == argument
    text = str(mismatch)
    assert "exists as a" not in text
    assert (
        f"'emails.dlq' was declared without {argument} (the app declares {argument} {value}" in text
    )
    assert "rabbitq dlq export emails FILE, rabbitmqctl delete_queue emails.dlq," in text
    assert "Migrating a deployed DLQ" in text
    # the same argument on the main queue still means its type
    main = Exception(str(error.args[0]).replace("'emails.dlq'", "'emails'"))
    assert "exists as a classic queue, the app wants quorum" in str(
        mismatch_from_error(main, known)
    )


def test_a_changed_delivery_limit_is_not_taken_for_a_type_change():
    error = Exception(
        "PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' for queue 'emails' in vhost "
        "'/': received the value '5' of type 'signedint' but current is the value '10' of type "
        "'signedint'"
    )
    text = str(mismatch_from_error(error))
    assert "'x-delivery-limit'" in text and "exists as a" not in text


def test_an_unroutable_publish_of_the_app_s_own_type_says_to_declare_its_queue_first() -> None:
    top = plan(queue="emails", exchange="x", delays_ms=[], routing_keys=["email.send"])
    assert top.unroutable("email.send", None) == (
        "queue 'emails' is not declared yet: start a worker of this app or run "
        "'rabbitq topology MODULE:APP' first"
    )
    assert "'rabbitq topology svc:app' first" in top.unroutable("email.send", "svc:app")
    assert top.unroutable("other.type", None).startswith(
        "no handler of this app (queue 'emails') takes 'other.type'"
    )
