"""Which worker runs a partitioned app (``App(partitions=N)``), decided at once without
a broker: ``Worker`` refuses the whole app in one line and runs one partition;
``PartitionedWorker`` runs them all, by composition (one ``Worker`` per partition)."""

from __future__ import annotations

import pytest

from rabbitq import App, ConfigurationError, Message, Worker
from rabbitq._worker.partitioned import PartitionedWorker


class Move(Message, type="pw.move"):
    key: str


def partitioned(n: int = 4) -> App:
    app = App(queue="orders", partitions=n)
    app.handler(Move, ordered_by=lambda m: m.key)(lambda m: None)
    return app


def test_a_worker_of_the_whole_partitioned_app_is_refused_in_one_line():
    with pytest.raises(ConfigurationError) as caught:
        Worker(partitioned())
    message = str(caught.value)
    assert "\n" not in message
    assert "PartitionedWorker(app)" in message and "app.partition(i)" in message


def test_a_worker_of_one_partition_consumes_that_partitions_queue():
    worker = Worker(partitioned().partition(2))
    assert worker.app.queue == "orders.p2"
    assert "orders.p2" in {q.name for q in worker.topology.queues}


def test_a_partitioned_worker_holds_one_plain_worker_per_partition():
    runner = PartitionedWorker(partitioned(4), home=[1, 3])
    assert not isinstance(runner, Worker)
    assert sorted(runner.partitions) == [0, 1, 2, 3]
    assert {w.app.queue for w in runner.partitions.values()} == {f"orders.p{i}" for i in range(4)}
    assert runner.first is runner.partitions[1] and runner.app.queue == "orders.p1"
    priorities = {i: w.consume_args["x-priority"] for i, w in runner.partitions.items()}
    assert priorities == {0: 0, 1: 10, 2: 0, 3: 10}  # home partitions first in line
    assert runner.started == []  # nothing before run()


def test_a_partitioned_worker_of_an_app_without_partitions_is_refused():
    app = App(queue="plain")
    app.handler(Move)(lambda m: None)
    with pytest.raises(ConfigurationError, match="no partitions"):
        PartitionedWorker(app)
