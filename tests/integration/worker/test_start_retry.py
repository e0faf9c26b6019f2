"""A worker that starts while its broker is not there, or whose connection goes while
it declares its queues or starts consuming, tries the start again, logging each try,
and then handles every message exactly once (issue 40, item 6: before, it exited at
once, or with ``ChannelInvalidStateError ... closed``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from rabbitq import App, BrokerUnavailable, Message, Worker
from rabbitq._worker import consumer as consumer_module
from rabbitq._worker import keeper as keeper_module
from rabbitq._worker import lifecycle
from tests.broker_node import BrokerNode, free_port
from tests.helpers import wait_for
from tests.proxy import TcpProxy

pytestmark = pytest.mark.broker

COUNT = 30


class Ping(Message, type="test.start.ping"):
    n: int


def counting(app: App) -> list[int]:
    handled: list[int] = []

    @app.handler(Ping)
    async def ping(msg: Ping) -> None:
        handled.append(msg.n)

    return handled


@asynccontextmanager
async def started(worker: Worker) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(worker.run())
    try:
        yield task
    finally:
        worker.stop()
        await asyncio.wait_for(task, 60)


async def handled_once_each(app: App, worker: Worker, task: asyncio.Task[None],
                            handled: list[int]) -> None:  # fmt: skip
    ready = asyncio.create_task(worker.ready.wait())
    await asyncio.wait({task, ready}, timeout=120, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        ready.cancel()
        task.result()  # the start's error (before the fix)
    assert ready.done(), "the worker never became ready"
    async with app.publisher() as pub:
        await pub.publish_many([Ping(n=i) for i in range(COUNT)])
    await wait_for(lambda: len(handled) >= COUNT, timeout=60)
    await asyncio.sleep(1.0)  # settled: nothing more comes
    assert sorted(handled) == list(range(COUNT))


def tries(caplog: pytest.LogCaptureFixture) -> int:
    return sum("waiting for RabbitMQ at" in str(r.msg) for r in caplog.records)


@pytest.mark.slow
async def test_a_worker_started_before_its_broker_waits_and_then_handles_every_message(
    uid, caplog
):
    caplog.set_level(logging.INFO, "rabbitq.worker")
    node = BrokerNode(name=f"start-{uid[:6]}")
    app = App(queue=f"t.{uid}.start", exchange=f"t.{uid}.x", url=node.url)
    handled = counting(app)
    worker = Worker(app, grace_period=5)
    try:
        async with started(worker) as task:
            await wait_for(lambda: tries(caplog) >= 2 or task.done(), timeout=60)
            assert not task.done(), "the worker exited instead of waiting for its broker"
            await asyncio.to_thread(node.start)
            await handled_once_each(app, worker, task, handled)
        assert "RabbitMQ at amqp://guest:***@127.0.0.1:" in caplog.text
    finally:
        await asyncio.to_thread(node.stop)


async def cut_for(proxy: TcpProxy, seconds: float) -> None:
    """Cut every connection through ``proxy`` and refuse new ones for ``seconds``."""
    proxy.cut()
    await asyncio.sleep(seconds)
    proxy.is_cut = False


@pytest.mark.parametrize("step", ["declare", "channel", "consume"])
async def test_a_connection_lost_during_the_start_is_one_more_try(
    make_app, broker_url, step, monkeypatch, caplog
):
    app = make_app()
    handled = counting(app)
    proxy = await TcpProxy(broker_url).start()
    cuts: list[asyncio.Task[None]] = []
    if step == "declare":
        real_declare = lifecycle.declare

        async def declare(channel: Any, topology: Any) -> Any:
            if not cuts:  # the first declare: the node goes under it
                cuts.append(asyncio.create_task(cut_for(proxy, 3.0)))
                await wait_for(lambda: channel.is_closed, timeout=30)
            return await real_declare(channel, topology)

        monkeypatch.setattr(lifecycle, "declare", declare)
    elif step == "channel":
        real_open = keeper_module.Keeper.open_copy_channel

        async def open_copy_channel(self: Any) -> None:
            if not cuts:  # the copy channel opens while the connection is gone
                cuts.append(asyncio.create_task(cut_for(proxy, 3.0)))
                await wait_for(lambda: not self._connection().connected.is_set(), timeout=30)
            await real_open(self)

        monkeypatch.setattr(keeper_module.Keeper, "open_copy_channel", open_copy_channel)
    else:
        real_consume = consumer_module.Consumer._consume

        async def consume(self: Any) -> None:
            if not cuts:  # the first basic.consume: the node goes under it
                cuts.append(asyncio.create_task(cut_for(proxy, 3.0)))
                await asyncio.sleep(0.2)
            await real_consume(self)

        monkeypatch.setattr(consumer_module.Consumer, "_consume", consume)
    worker = Worker(app, url=proxy.url, grace_period=5)
    try:
        async with started(worker) as task:
            await handled_once_each(app, worker, task, handled)
        assert cuts  # (the declare may also wait for aio-pika's own reconnect)
    finally:
        await proxy.close()


async def test_a_bounded_wait_gives_up_with_one_error(make_app):
    app = make_app()
    counting(app)
    worker = Worker(app, url=f"amqp://guest:guest@127.0.0.1:{free_port()}/", start_wait=3)
    with pytest.raises(BrokerUnavailable, match=r"cannot reach RabbitMQ.*\(waited 3s"):
        await asyncio.wait_for(worker.run(), 60)


async def test_a_refused_login_is_raised_at_the_first_try(make_app, broker_url):
    app = make_app()
    counting(app)
    wrong = broker_url.replace("guest:guest@", "guest:not-the-password@")
    worker = Worker(app, url=wrong)  # waits for ever for a broker, never for a password
    with pytest.raises(BrokerUnavailable, match="refused the login"):
        await asyncio.wait_for(worker.run(), 60)
