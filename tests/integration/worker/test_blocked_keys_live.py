"""A key blocked by ``on_dead="block"`` stays blocked when its worker restarts and when
its partition moves to another process, because it is kept in the broker
(``<queue>.blocked``); a replay still unblocks it (docs/ordering.md, "Blocked keys").
The partitions need the consistent-hash exchange plugin: the module runs on
``hash_broker_url`` (the broker under test if it has it, else a private node)."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq import Message, Metrics, PermanentError, RetryPolicy, Worker
from rabbitq._amqp.teardown import delete
from rabbitq._worker.partitioned import PartitionedWorker
from rabbitq.dlq import replay
from tests.helpers import queue_depth, running, wait_for

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def broker_url(hash_broker_url: str) -> str:
    """This module's broker (for ``make_app``, ``connection``, ...): one with the
    consistent-hash exchange plugin, a private node where the broker under test lacks it."""
    return hash_broker_url


class Posting(Message, type="test.blocked_keys.posting"):
    account: str
    seq: int


def _ledger(app, broken: set[tuple[str, int]], seen: list[tuple[str, int]]) -> None:
    @app.handler(Posting, ordered_by=lambda m: m.account, on_dead="block")
    async def post(msg: Posting) -> None:
        if (msg.account, msg.seq) in broken:
            raise PermanentError("declined")
        seen.append((msg.account, msg.seq))


async def _depth_is(connection, queue: str, depth: int) -> bool:
    return await queue_depth(connection, queue) == depth


async def test_a_blocked_key_stays_blocked_after_its_worker_restarts(make_app, connection):
    app = make_app(queue_type="classic", retry=RetryPolicy(delays=(0.05,)))
    broken, seen = {("a", 1)}, []
    _ledger(app, broken, seen)
    dlq, registry = f"{app.queue}.dlq", f"{app.queue}.blocked"

    async with running(Worker(app)):
        async with app.publisher() as pub:
            await pub.publish(Posting(account="a", seq=1))
            await pub.publish(Posting(account="b", seq=1))
        await wait_for(lambda: _depth_is(connection, dlq, 1), timeout=10)
        await wait_for(lambda: ("b", 1) in seen)

    metrics = Metrics()  # a new worker: the old one's memory is gone (a restart)
    async with running(Worker(app, hooks=metrics)):
        async with app.publisher() as pub:
            await pub.publish(Posting(account="a", seq=2))
            await pub.publish(Posting(account="b", seq=2))
        await wait_for(lambda: ("b", 2) in seen)
        await wait_for(
            lambda: ("a", 2) in seen or _depth_is(connection, dlq, 2), timeout=10
        )
        assert ("a", 2) not in seen  # not handled ahead of the dead a1
        assert await queue_depth(connection, registry) == 1  # kept in the broker
        assert "keys blocked behind a dead letter: 'a'" in (metrics.ready_detail() or "")
        assert metrics.registry.get_sample_value(
            "rabbitq_ordered_keys_blocked", {"queue": app.queue}
        ) == 1

        broken.clear()  # the operator fixed the cause: replay, in the DLQ's order
        await replay(app.queue, url=app.url)
        await wait_for(lambda: ("a", 2) in seen)
        await wait_for(lambda: _depth_is(connection, registry, 0), timeout=10)
        assert metrics.registry.get_sample_value(
            "rabbitq_ordered_keys_blocked", {"queue": app.queue}
        ) == 0

    assert [s for a, s in seen if a == "a"] == [1, 2]


async def test_a_blocked_key_stays_blocked_when_its_partition_moves(make_app, connection):
    app = make_app(queue_type="classic", partitions=2, retry=RetryPolicy(delays=(0.05,)))
    broken, seen = {("a", 1)}, []
    _ledger(app, broken, seen)
    dlq = f"{app.queue}.dlq"
    first = PartitionedWorker(app, standby_delay=0.1, rebalance_interval=600)
    second_metrics = Metrics()
    second = PartitionedWorker(
        app, standby_delay=0.1, rebalance_interval=600, hooks=second_metrics
    )
    tasks = [asyncio.create_task(first.run())]
    try:
        await wait_for(lambda: len(first.started) == 2, timeout=15)  # active on both
        tasks.append(asyncio.create_task(second.run()))  # stands by on both
        await wait_for(lambda: len(second.started) == 2, timeout=15)
        async with app.publisher() as pub:
            await pub.publish(Posting(account="a", seq=1))
        await wait_for(lambda: _depth_is(connection, dlq, 1), timeout=10)

        first.stop()  # its partitions move to the second process
        await asyncio.wait_for(tasks.pop(0), timeout=30)
        async with app.publisher() as pub:
            await pub.publish(Posting(account="a", seq=2))
            await pub.publish(Posting(account="b", seq=1))
        await wait_for(lambda: ("b", 1) in seen)
        await wait_for(
            lambda: ("a", 2) in seen or _depth_is(connection, dlq, 2), timeout=10
        )
        assert ("a", 2) not in seen  # not handled ahead of the dead a1
        assert "'a'" in (second_metrics.ready_detail() or "")
    finally:
        for worker in (first, second):
            worker.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
        await delete(connection, app.topology(), force=True)  # amqp.teardown

