"""amqp.partitions and amqp.partition_plan: names, arguments and the key header (pure)."""

from __future__ import annotations

import pytest

from rabbitq import App, Message, RetryPolicy
from rabbitq._amqp import partitions
from rabbitq._amqp.partition_plan import plan_partition
from rabbitq._worker.partitioned import homes
from rabbitq.errors import ConfigurationError


class Move(Message, type="test.partitions.move"):
    account: str


def test_each_partition_is_a_single_active_consumer_queue_feeding_the_shared_dlq():
    topology = plan_partition(
        queue="ledger", exchange="x", delays_ms=[1000], routing_keys=["a", "b"], count=3, index=1
    )
    assert topology.main.name == "ledger.p1"
    assert topology.main.arguments["x-single-active-consumer"] is True
    assert topology.main.arguments["x-dead-letter-routing-key"] == "ledger.dlq"
    assert topology.dlq.name == "ledger.dlq"
    assert [q.name for q in topology.retries] == ["ledger.p1.retry.1s"]
    assert topology.retries[0].arguments["x-dead-letter-routing-key"] == "ledger.p1"
    assert topology.routing_keys == ()  # bound through the hash exchange instead
    p = topology.partitioning
    assert p is not None
    assert (p.exchange, p.source, p.routing_keys) == ("ledger.partitions", "x", ("a", "b"))
    assert p.mains == ("ledger.p0", "ledger.p1", "ledger.p2")
    assert [q.name for q in p.queues if q.kind == "retry"] == [
        "ledger.p0.retry.1s", "ledger.p1.retry.1s", "ledger.p2.retry.1s"
    ]
    assert p.hash_arguments == {"hash-header": "rabbitq-key"}


def test_an_app_with_partitions_plans_them_and_ordered_handlers_need_no_retry_queues():
    app = App(queue="ledger", partitions=4, retry=RetryPolicy(delays=(1, 5)))
    app.handler(Move, ordered_by=lambda m: m.account)(lambda m: None)

    topology = app.topology()
    assert topology.main.name == "ledger.p0" and topology.retries == ()
    view = app.partition(2)
    assert view.queue == "ledger.p2" and view.topology().main.name == "ledger.p2"
    assert view.handlers is app.handlers
    with pytest.raises(ConfigurationError, match="partition 4 of 4"):
        app.partition(4)


def test_a_blocking_handler_gives_each_partition_a_registry_of_blocked_keys():
    app = App(queue="ledger", partitions=2, queue_type="quorum")
    app.handler(Move, ordered_by=lambda m: m.account, on_dead="block")(lambda m: None)

    topology = app.partition(1).topology()
    assert topology.blocked is not None and topology.blocked.name == "ledger.p1.blocked"
    assert topology.blocked in topology.queues
    assert topology.blocked.arguments == topology.dlq.arguments  # nothing drops an entry
    p = topology.partitioning
    assert p is not None
    assert [q.name for q in p.queues if q.kind == "blocked"] == [
        "ledger.p0.blocked", "ledger.p1.blocked"
    ]
    assert ("ledger.p0.blocked", "blocked") in topology.depth_specs()  # topology --delete


def test_an_app_whose_handlers_skip_dead_keys_has_no_registry():
    app = App(queue="ledger", partitions=2)
    app.handler(Move, ordered_by=lambda m: m.account)(lambda m: None)
    plain = App(queue="plain")
    plain.handler(Move, ordered_by=lambda m: m.account, on_dead="block")(lambda m: None)

    assert app.topology().blocked is None
    assert not [q for q in app.topology().depth_specs() if q[1] == "blocked"]
    assert plain.topology().blocked is not None
    assert plain.topology().blocked.name == "plain.blocked"


@pytest.mark.parametrize("bad", [-1, 257, True, "2"])
def test_partitions_must_be_a_small_count(bad):
    with pytest.raises(ConfigurationError, match="partitions must be 0 to 256"):
        App(queue="q", partitions=bad)


def test_the_key_header_is_the_ordered_by_key_else_the_message_id():
    app = App(queue="q", partitions=2)
    app.handler(Move, ordered_by=lambda m: m.account)(lambda m: None)
    headers: dict[str, str] = {}
    partitions.stamp(app, Move(account="acct-9"), headers, "m-1", False)
    assert headers == {"rabbitq-key": "acct-9"}

    plain = App(queue="q2", partitions=2)
    plain.handler(Move)(lambda m: None)
    headers = {}
    partitions.stamp(plain, Move(account="acct-9"), headers, "m-1", False)
    assert headers == {"rabbitq-key": "m-1"}

    unpartitioned = App(queue="q3")
    unpartitioned.handler(Move)(lambda m: None)
    headers = {}
    partitions.stamp(unpartitioned, Move(account="x"), headers, "m-1", False)
    assert headers == {}


def test_a_delayed_message_of_a_partitioned_app_is_refused_before_sending():
    app = App(queue="q", partitions=2)
    with pytest.raises(ConfigurationError, match="not supported with App\\(partitions=N\\)"):
        partitions.stamp(app, Move(account="x"), {}, "m", True)


def test_doctor_finds_a_broker_without_the_consistent_hash_exchange():
    assert partitions.exchange_types_problem(["direct", "topic", "x-consistent-hash"]) is None
    problem = partitions.exchange_types_problem(["direct", "topic"])
    assert problem is not None
    assert "rabbitmq-plugins enable rabbitmq_consistent_hash_exchange" in problem


def test_processes_split_the_partitions_as_their_homes():
    assert [homes(6, i, 3) for i in range(3)] == [[0, 3], [1, 4], [2, 5]]
    assert homes(2, 2, 3) == [0, 1]  # more processes than partitions: stands by for all
    assert homes(4, 0, 1) == [0, 1, 2, 3]


def test_rabbitq_topology_shows_every_partition_and_the_hash_exchange():
    from click.testing import CliRunner

    from rabbitq.cli import main

    result = CliRunner().invoke(main, ["topology", "examples.ledger:app", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    names = result.output
    for name in ("example-ledger.p0", "example-ledger.p3", "example-ledger.partitions"):
        assert name in names
    assert "x-single-active-consumer" in names and "rabbitq-key" in names
