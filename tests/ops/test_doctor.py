"""``rabbitq doctor``'s decisions, as data: facts in, findings out (no broker)."""

from __future__ import annotations

from dataclasses import replace

from rabbitq import App, Message, RetryPolicy
from rabbitq._amqp.brokers import BrokerVersion, facts_for
from rabbitq._amqp.topology import plan
from rabbitq._ops.doctor import diagnose, worst
from rabbitq._ops.doctor_facts import Facts, QueueState


class Ping(Message, type="doctor.ping"):
    n: int = 0


def make_app(queue_type="quorum", timeout=30.0) -> App:
    app = App(queue="orders", queue_type=queue_type, retry=RetryPolicy(delays=(1, 10)))

    @app.handler(Ping, timeout=timeout)
    async def ping(msg: Ping) -> None: ...

    return app


def facts(app=None, version="3.10.8", **changes) -> Facts:
    app = app or make_app()
    topology = app.topology()
    queues = {
        spec.name: QueueState(
            name=spec.name, exists=True, messages=0, arguments=dict(spec.arguments)
        )
        for spec in topology.queues
    }
    base = Facts(
        broker=facts_for(BrokerVersion.parse(version)),
        topology=topology,
        handlers=app.handlers,
        queues=queues,
        consumer_timeout=None,
        management_url="http://127.0.0.1:15672",
        other_queues={spec.name: 0 for spec in topology.queues},
        alarms=[],
    )
    return replace(base, **changes)


def with_queue(f: Facts, name: str, **changes) -> Facts:
    return replace(f, queues={**f.queues, name: replace(f.queues[name], **changes)})


def levels(findings, topic):
    return [x.level for x in findings if x.topic == topic]


def test_a_healthy_app_on_3_10_has_no_danger_and_says_what_the_version_means():
    found = diagnose(facts())
    assert worst(found) == "info", [x.message for x in found if x.level != "info"]
    assert found[0].message == "RabbitMQ 3.10.8: 3.x behaviour"


def test_on_4_x_a_quorum_dlq_with_the_default_limit_is_a_danger_because_reads_count():
    # a DLQ declared before rabbitq gave it an explicit limit (issue 11)
    old_dlq = with_queue(facts(version="4.1.0"), "orders.dlq", arguments={"x-queue-type": "quorum"})
    # (its arguments also drift from the app's: a danger of its own, topic "drift")
    found = [x for x in diagnose(old_dlq) if x.level == "danger" and x.topic == "broker"]
    assert len(found) == 1 and "orders.dlq" in found[0].message
    assert "delivery limit of 20" in found[0].message
    assert '"delivery-limit":-1' in found[0].fix


def test_on_4_x_a_dlq_declared_with_limit_minus_1_is_fine():
    f = facts(version="4.3.0")
    f = with_queue(f, "orders.dlq", arguments={"x-queue-type": "quorum", "x-delivery-limit": -1})
    assert "danger" not in levels(diagnose(f), "broker")


def test_on_3_10_a_dlq_limit_of_minus_1_drops_at_the_first_read():
    f = with_queue(
        facts(), "orders.dlq", arguments={"x-queue-type": "quorum", "x-delivery-limit": -1}
    )
    found = [x for x in diagnose(f) if x.topic == "broker" and x.level == "danger"]
    assert found and "delivery limit of 0" in found[0].message
    assert "remove" in found[0].fix  # no -1 on 3.x: leave the limit out


def test_argument_drift_is_a_danger_with_each_differing_argument():
    f = with_queue(
        facts(),
        "orders",
        arguments={**facts().queues["orders"].arguments, "x-delivery-limit": 5},
    )
    found = [x for x in diagnose(f) if x.topic == "queues"]
    assert [x.level for x in found] == ["danger"]
    assert "x-delivery-limit is 5 on the broker, the app declares 10" in found[0].message


def test_without_the_management_api_drift_comes_from_the_brokers_refusal():
    f = with_queue(
        facts(), "orders.retry.1s", arguments=None, mismatch="PRECONDITION_FAILED - inequivalent"
    )
    assert levels(diagnose(f), "queues") == ["danger"]


def test_missing_queues_are_only_information():
    f = with_queue(facts(), "orders", exists=False, arguments=None)
    assert levels(diagnose(f), "queues") == ["info"]


def test_a_retry_queue_of_a_delay_the_app_no_longer_has_is_reported_with_its_depth():
    f = facts(other_queues={"orders.retry.5m": 7, "orders.retry.2s": 0, "other.retry.5m": 3})
    found = [x for x in diagnose(f) if x.topic == "retry queues"]
    assert [(x.level, x.message.split()[0]) for x in found] == [
        ("info", "orders.retry.2s"),
        ("warning", "orders.retry.5m"),
    ]
    assert "is empty" in found[0].message and "safe to delete" in found[0].message
    assert "holds 7 message(s)" in found[1].message
    assert "come back to orders" in found[1].message and "not checked" in found[1].message
    for x in found:  # never a delete that could take messages with it
        assert x.fix and "--prune" in x.fix and "delete_queue" not in x.fix


def test_a_stale_retry_queue_whose_messages_never_come_back_is_a_danger():
    old = plan(queue="orders", exchange="rabbitq", delays_ms=(300_000,), routing_keys=(),
               queue_type="quorum").retries[0].arguments  # fmt: skip
    f = facts(
        other_queues={"orders.retry.5m": 7, "orders.retry.2m": 1, "orders.retry.1m": 0},
        other_arguments={
            "orders.retry.5m": dict(old),
            "orders.retry.2m": {"x-queue-type": "quorum"},  # no TTL, no dead-letter target
            "orders.retry.1m": {"x-message-ttl": 60_000, "x-dead-letter-exchange": "x"},
        },
    )
    found = {x.message.split()[0]: x for x in diagnose(f) if x.topic == "retry queues"}
    assert found["orders.retry.5m"].level == "warning"
    assert "come back to orders when its TTL (5m) runs out;" in found["orders.retry.5m"].message
    assert found["orders.retry.2m"].level == "danger"
    assert "holds 1 message(s) that never come back" in found["orders.retry.2m"].message
    assert "shovel" in (found["orders.retry.2m"].fix or "")
    assert found["orders.retry.1m"].level == "info"  # empty: its arguments do not matter
    # no dead-letter routing key: back to itself, not to orders
    no_key = {"x-message-ttl": 60_000, "x-dead-letter-exchange": ""}
    wrong_target = facts(other_queues={"orders.retry.1m": 2},
                         other_arguments={"orders.retry.1m": no_key})  # fmt: skip
    assert levels(diagnose(wrong_target), "retry queues") == ["danger"]


def test_handler_timeouts_past_consumer_timeout_are_warned_with_the_versions_response():
    found = diagnose(facts(app=make_app(timeout=None), version="4.3.1", consumer_timeout=600))
    warned = [x for x in found if x.topic == "timeouts"]
    assert [x.level for x in warned] == ["warning"]
    assert "basic.cancel" in warned[0].message
    assert levels(diagnose(facts(consumer_timeout=600)), "timeouts") == ["info"]


def test_on_4_3_a_slow_handler_gets_its_own_consumer_timeout_and_classic_queues_none():
    slow = make_app(timeout=2700)  # 45 minutes against the default 30
    assert levels(diagnose(facts(app=slow, version="3.10.8")), "timeouts") == ["warning"]
    # the worker asks for x-consumer-timeout, which 3.12+ honours
    assert levels(diagnose(facts(app=slow, version="4.3.0")), "timeouts") == ["info"]
    # 4.3 enforces consumer_timeout on quorum queues only
    unbounded = make_app(queue_type="classic", timeout=None)
    assert levels(diagnose(facts(app=unbounded, version="4.3.0")), "timeouts") == []
    assert levels(diagnose(facts(app=unbounded, version="4.2.0")), "timeouts") == ["warning"]


def test_a_per_queue_consumer_timeout_policy_is_used():
    f = with_queue(facts(), "orders", effective_policy={"consumer-timeout": 10_000})
    assert levels(diagnose(f), "timeouts") == ["warning"]  # 30 s handler, 10 s limit


def test_an_active_alarm_is_a_danger():
    found = diagnose(facts(alarms=["memory alarm on rabbit@a"]))
    assert levels(found, "alarms") == ["danger"]


def test_an_unreachable_management_api_is_a_warning_not_a_danger():
    f = facts(management_error="connection refused", other_queues=None, alarms=None)
    found = diagnose(f)
    assert levels(found, "management") == ["warning"] and worst(found) == "warning"


def dlq_policy(definition, **kw):
    return with_queue(facts(), "orders.dlq", policy="ops", effective_policy=definition, **kw)


def test_a_length_limit_on_the_dlq_that_drops_the_head_is_a_danger():
    old_dlq = {"x-queue-type": "quorum"}  # without rabbitq's x-overflow: reject-publish
    for definition in ({"max-length": 10}, {"max-length-bytes": 1, "overflow": "drop-head"}):
        found = [
            x for x in diagnose(dlq_policy(definition, arguments=old_dlq)) if x.topic == "policies"
        ]
        assert [x.level for x in found] == ["danger"], definition
        assert "dropped" in found[0].message and "reject-publish" in found[0].fix


def test_reject_publish_as_argument_beats_a_policy_that_only_sets_the_length():
    f = dlq_policy(
        {"max-length": 10},
        arguments={"x-queue-type": "quorum", "x-overflow": "reject-publish"},
    )
    assert levels(diagnose(f), "policies") == ["warning"]
    # ... but not a policy that says drop-head itself
    f = dlq_policy(
        {"max-length": 10, "overflow": "drop-head"},
        arguments={"x-queue-type": "quorum", "x-overflow": "reject-publish"},
    )
    assert levels(diagnose(f), "policies") == ["danger"]


def test_ttl_expiry_and_a_delivery_limit_on_the_dlq_are_dangers():
    found = diagnose(dlq_policy({"message-ttl": 1000, "expires": 60000, "delivery-limit": 5}))
    policies = [x for x in found if x.topic == "policies"]
    assert [x.level for x in policies] == ["danger", "danger", "danger"]
    assert "'ops'" in policies[0].message and "ops" in policies[0].fix


def test_a_message_ttl_policy_on_a_retry_queue_only_shortens_the_delay():
    f = with_queue(facts(), "orders.retry.10s", policy="p", effective_policy={"message-ttl": 5})
    assert levels(diagnose(f), "policies") == ["warning"]


def test_an_operator_policy_is_named_in_the_finding():
    f = with_queue(facts(), "orders", operator_policy="limits", effective_policy={"message-ttl": 5})
    found = [x for x in diagnose(f) if x.topic == "policies"]
    assert found[0].level == "danger" and "operator policy 'limits'" in found[0].message
    assert "dead-lettered unhandled" in found[0].message  # the main queue has a DLX


def test_dead_letters_a_retry_queue_holds_but_does_not_hand_on_are_a_danger():
    f = with_queue(facts(), "orders.retry.1s", stuck=437)
    found = [x for x in diagnose(f) if x.topic == "queues"]
    assert [x.level for x in found] == ["danger"]
    assert "437 dead-lettered message(s) it has not handed on to orders" in found[0].message
    assert "upgrade RabbitMQ" in found[0].fix and "set_policy rabbitq-touch" in found[0].fix


def test_the_dlq_limit_rabbitq_declares_is_no_danger_on_3_10_or_4_x():
    for version in ("3.10.8", "4.1.0", "4.3.0"):
        assert "danger" not in levels(diagnose(facts(version=version)), "broker"), version


def test_a_redis_store_without_persistence_is_a_warning_with_its_fix():
    from rabbitq._ops.doctor_facts import StoreFacts

    def said(**store):
        found = [x for x in diagnose(facts(stores=[StoreFacts(where="redis://r/0", **store)]))
                 if x.topic == "stores"]  # fmt: skip
        assert len(found) == 1
        return found[0]

    bare = said(appendonly="no", save="")
    assert bare.level == "warning" and "keeps no persistence" in bare.message
    assert "appendonly yes" in (bare.fix or "")
    assert said(appendonly="no", save="3600 1").level == "warning"  # RDB only
    assert "RDB snapshots only" in said(appendonly="no", save="3600 1").message
    assert said(appendonly="yes", save="").level == "info"
    assert said(appendonly=None, save=None).level == "info"  # CONFIG refused: look yourself
    assert said(error="refused").level == "warning"
    assert [x for x in diagnose(facts()) if x.topic == "stores"] == []  # no Redis store


async def test_doctor_reads_the_persistence_of_the_apps_redis():
    from rabbitq._ops.doctor_probe import _redis_facts, redis_locations
    from rabbitq.backends import RedisBackend
    from tests.redis_node import RedisNode

    for persist in (False, True):
        with RedisNode.started(persist=persist) as node:
            app = App(queue="orders", backend=RedisBackend(node.url), cancellable=True)
            (where,) = redis_locations(app)
            found = await _redis_facts(where)
        assert found.appendonly == ("yes" if persist else "no") and found.error is None
    down = await _redis_facts(where)  # stopped: it does not answer
    assert down.error is not None
