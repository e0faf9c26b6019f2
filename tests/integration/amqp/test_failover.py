"""Several broker addresses against the real broker: a dead address costs one attempt,
and every reconnect moves on to the next address (the cluster chaos scenario in
tests/chaos/test_cluster.py kills real nodes)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from rabbitq._amqp.connection import connect, connect_once
from rabbitq._amqp.failover import FailoverConnection
from rabbitq.errors import BrokerUnavailable
from tests.broker_node import free_port
from tests.integration.worker.test_reconnect import close_connections_named

pytestmark = pytest.mark.broker


def dead_url() -> str:
    return f"amqp://guest:guest@127.0.0.1:{free_port()}/"


async def test_a_worker_connects_to_the_live_node_whichever_order_the_shuffle_gives(broker_url):
    for _ in range(4):
        connection = await connect(f"{dead_url()},{broker_url}", name="rabbitq failover test")
        try:
            assert isinstance(connection, FailoverConnection)
            assert connection.current_url.endswith(broker_url.rsplit("@", 1)[1])
            channel = await connection.channel()
            await channel.close()
        finally:
            await connection.close()
        once = await connect_once(f"{broker_url},{dead_url()}", name="rabbitq failover test")
        await once.close()


async def test_when_no_node_answers_the_error_names_them_all_without_the_password():
    with pytest.raises(BrokerUnavailable) as info:
        await connect(f"{dead_url()},{dead_url()}", name="rabbitq failover test", timeout=3)
    assert str(info.value).count("guest:***@127.0.0.1") == 2
    assert "guest:guest" not in str(info.value)


async def test_each_reconnect_takes_the_next_address(broker_url):
    name = f"rabbitq failover {uuid.uuid4().hex[:8]}"
    # live, dead, live: after the connection is closed the next attempt goes to the dead
    # address, fails, and the one after reaches the live one again.
    connection = FailoverConnection(
        [broker_url, dead_url(), broker_url],
        client_properties={"connection_name": name},
        reconnect_interval=0.2,
    )
    await connection.connect(timeout=5)
    try:
        reconnected = asyncio.Event()
        connection.reconnect_callbacks.add(lambda *_: reconnected.set())
        queue = await (await connection.channel()).declare_queue(exclusive=True)
        assert connection._attempts == 1
        await asyncio.to_thread(close_connections_named, name)
        await asyncio.wait_for(reconnected.wait(), 30)
        assert connection._attempts == 3
        # the channel and its exclusive queue were restored on the reconnected node
        await queue.channel.declare_queue(queue.name, passive=True)
    finally:
        await connection.close()
