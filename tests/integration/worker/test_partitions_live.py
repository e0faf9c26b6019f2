"""Partitioned workers against a real broker with the consistent-hash exchange plugin
(``hash_broker_url``: the broker under test if it has it, else a private node): messages
spread over the partitions by key, and a stand-by partition is given back to the process
whose home it is (docs/ordering.md, "Spreading")."""

from __future__ import annotations

import asyncio
import collections

import pytest

from rabbitq import Message, RetryPolicy
from rabbitq._amqp.teardown import delete
from rabbitq._worker.partitioned import PartitionedWorker
from rabbitq.hooks import Hooks
from tests.helpers import wait_for

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def broker_url(hash_broker_url: str) -> str:
    """This module's broker (for ``make_app``, ``connection``, ...): one with the
    consistent-hash exchange plugin, a private node where the broker under test lacks it."""
    return hash_broker_url


class Step(Message, type="test.partitions.step"):
    key: str
    seq: int


class Received(Hooks):
    def __init__(self) -> None:
        self.by_queue: collections.Counter[str] = collections.Counter()

    def received(self, queue: str, type_name: str) -> None:
        self.by_queue[queue] += 1


async def test_a_returning_home_process_gets_its_partition_back_in_order(make_app, connection):
    app = make_app(queue_type="classic", partitions=2, retry=RetryPolicy(delays=(0.05,)))
    seen: dict[str, list[int]] = collections.defaultdict(list)

    @app.handler(Step, ordered_by=lambda m: m.key)
    async def step(msg: Step) -> None:
        await asyncio.sleep(0.002)
        seen[msg.key].append(msg.seq)

    a_hooks, b_hooks = Received(), Received()
    b = PartitionedWorker(app, home=[1], standby_delay=0.1, rebalance_interval=1.0, hooks=b_hooks)
    a = PartitionedWorker(app, home=[0], standby_delay=0.1, rebalance_interval=1.0, hooks=a_hooks)
    tasks = [asyncio.create_task(b.run())]
    try:
        await wait_for(lambda: len(b.started) == 2, timeout=15)  # b active on both
        tasks.append(asyncio.create_task(a.run()))  # a's home p0 waits behind b
        await wait_for(lambda: len(a.started) == 2, timeout=15)
        async with app.publisher() as pub:
            for seq in range(1, 121):
                await asyncio.gather(*(pub.publish(Step(key=f"k{k}", seq=seq)) for k in range(8)))
                await asyncio.sleep(0.02)
                if b.yielded and a_hooks.by_queue[f"{app.queue}.p0"] > 20:
                    break
        await wait_for(lambda: sum(map(len, seen.values())) == 8 * seq, timeout=30)
    finally:
        for worker in (a, b):
            worker.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
        await delete(connection, app.topology(), force=True)  # amqp.teardown

    assert b.yielded >= 1
    assert a_hooks.by_queue[f"{app.queue}.p0"] > 0  # p0 came home
    assert b_hooks.by_queue[f"{app.queue}.p1"] > 0
    for key, seqs in seen.items():
        first = list(dict.fromkeys(seqs))
        assert first == sorted(first), key  # duplicates aside, in order


async def test_the_ledger_example_applies_each_account_in_order(broker_url, uid, connection):
    from decimal import Decimal

    from examples.ledger import SAMPLES, MemoryLedger, create_app, publish_samples
    from rabbitq._ops.run import WorkerSpec, worker_for
    from tests.helpers import queue_depth

    book = MemoryLedger()
    app = create_app(
        queue=f"example-ledger-{uid}", exchange=f"examples-{uid}", url=broker_url,
        ledger=book, partitions=2,
    )  # fmt: skip
    worker = worker_for(app, WorkerSpec(app_spec="-", url=broker_url), hooks=None)
    task = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: worker.ready.is_set(), timeout=15)
        await publish_samples(app)
        await wait_for(lambda: sum(map(len, book.applied.values())) == len(SAMPLES) - 2)
        await wait_for(lambda: _depth_is(connection, f"{app.queue}.dlq", 2, queue_depth))
    finally:
        worker.stop()
        await asyncio.wait_for(task, timeout=60)
        await delete(connection, app.topology(), force=True)  # amqp.teardown

    assert book.balances == {"acct-1": Decimal("0.00"), "acct-2": Decimal("5.00"),
                             "acct-3": Decimal("10.00")}  # fmt: skip
    assert book.applied == {"acct-1": [1, 2, 3], "acct-2": [1], "acct-3": [1]}


async def _depth_is(connection, queue, depth, queue_depth) -> bool:
    return await queue_depth(connection, queue) == depth


async def test_topology_delete_removes_the_partitions_and_their_hash_exchange(
    make_app, connection
):
    from rabbitq._amqp.topology import declare

    app = make_app(partitions=3)

    @app.handler(Step, ordered_by=lambda m: m.key)
    async def step(msg: Step) -> None: ...

    topology = app.topology()
    channel = await connection.channel()
    await declare(channel, topology)
    await channel.close()
    result = await delete(connection, topology)
    assert result.deleted and result.exchange_deleted, result
    for name in (topology.partitioning.exchange, app.exchange):
        probe = await connection.channel()
        with pytest.raises(Exception, match="NOT_FOUND"):
            await probe.declare_exchange(name, passive=True)
    for spec in topology.partitioning.queues:
        probe = await connection.channel()
        with pytest.raises(Exception, match="NOT_FOUND"):
            await probe.declare_queue(spec.name, passive=True)
