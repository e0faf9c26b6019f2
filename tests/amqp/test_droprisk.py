"""Which effective settings drop messages from a queue (pure), as RabbitMQ 3.10.8
combines queue arguments and policies."""

from __future__ import annotations

from rabbitq._amqp.droprisk import drop_risks, summary
from rabbitq._amqp.topology import dlq_arguments

QUORUM = dlq_arguments("quorum")
CLASSIC = dlq_arguments("classic")


def settings(risks):
    return [(r.setting, r.value, r.source) for r in risks]


def test_rabbitqs_own_dlq_arguments_drop_nothing():
    assert drop_risks(QUORUM, {}) == [] and drop_risks(CLASSIC, None) == []


def test_a_message_ttl_policy_on_a_dlq_drops_its_dead_letters():
    risks = drop_risks(QUORUM, {"message-ttl": 2000}, operator_policy="ttl")
    assert settings(risks) == [("message-ttl", 2000, "operator policy 'ttl'")]
    assert "older than 2000 ms are dropped" in str(risks[0])


def test_the_lower_of_argument_and_policy_ttl_applies():
    risks = drop_risks({**CLASSIC, "x-message-ttl": 500}, {"message-ttl": 60000}, policy="p")
    assert settings(risks) == [("message-ttl", 500, "argument")]


def test_a_length_limit_drops_only_with_overflow_drop_head():
    # rabbitq's DLQs say reject-publish: a max-length policy alone refuses, never drops
    assert drop_risks(QUORUM, {"max-length": 10}) == []
    assert drop_risks(CLASSIC, {"max-length": 10}) == []
    # on quorum queues the policy's overflow wins over the argument ...
    risks = drop_risks(QUORUM, {"max-length": 10, "overflow": "drop-head"}, policy="p")
    assert settings(risks) == [("max-length", 10, "policy 'p'")]
    # ... on classic queues the argument does
    assert drop_risks(CLASSIC, {"max-length": 10, "overflow": "drop-head"}) == []
    # a queue without x-overflow drops the head by default
    assert settings(drop_risks({}, {"max-length-bytes": 1024})) == [
        ("max-length-bytes", 1024, "policy")
    ]


def test_expires_deletes_the_queue_with_a_dead_letter_target_or_without():
    target = {"dead-letter-exchange": "", "dead-letter-routing-key": "x"}
    risks = drop_risks(QUORUM, {"expires": 60000, "message-ttl": 1000, **target})
    assert settings(risks) == [("expires", 60000, "policy")]  # the TTL moves, not drops


def test_policy_and_operator_policy_are_both_named_and_the_summary_is_one_line():
    risks = drop_risks(QUORUM, {"message-ttl": 5, "expires": 9}, policy="a", operator_policy="b")
    line = summary("emails.dlq", risks)
    assert line.startswith("emails.dlq drops messages: message-ttl 5 (policy 'a' / operator")
    assert "expires 9" in line and "\n" not in line
