"""The broker's delivery-acknowledgement timeout (``consumer_timeout``): a handler slower
than it makes RabbitMQ close the worker's channel (PRECONDITION_FAILED); the worker
recovers and the message is redelivered, not lost. Runs on a private node with a tiny
``consumer_timeout``, never on the shared broker."""

from __future__ import annotations

import asyncio
import logging

import aio_pika
import pytest

from rabbitq import App, Context, Message, RetryPolicy, Worker
from tests.broker_node import BrokerNode
from tests.helpers import Recorder, queue_depth, running, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]

CONSUMER_TIMEOUT_MS = 1000


class Report(Message, type="test.timeout.report"):
    n: int


@pytest.fixture(scope="module")
def node():
    config = f"consumer_timeout = {CONSUMER_TIMEOUT_MS}\n"
    with BrokerNode.started("rq-timeout", config=config) as n:
        # The timeout is checked on each channel's tick (every 60 s by default); new
        # channels tick every 200 ms on this node, so the test takes seconds, not minutes.
        n.ctl("eval", "application:set_env(rabbit, channel_tick_interval, 200).")
        yield n


async def test_a_handler_slower_than_the_consumer_timeout_has_its_message_redelivered(node, caplog):
    caplog.set_level(logging.INFO)
    app = App(queue="timeouts", exchange="timeouts", url=node.url, retry=RetryPolicy(delays=()))
    calls: list[tuple[int, bool]] = []

    @app.handler(Report, timeout=30)
    async def build(report: Report, ctx: Context) -> None:
        calls.append((report.n, ctx.redelivered))
        if len(calls) == 1:
            await asyncio.sleep(CONSUMER_TIMEOUT_MS / 1000 * 3)  # far past the broker's limit

    rec = Recorder()
    async with running(Worker(app, url=node.url, hooks=rec, grace_period=5)) as worker:
        async with app.publisher() as pub:
            await pub.publish(Report(n=1))
        await wait_for(lambda: rec.count("succeeded") >= 1, timeout=30)
        assert worker.ready.is_set()
        async with app.publisher() as pub:  # and it keeps consuming
            await pub.publish(Report(n=2))
        await wait_for(lambda: rec.count("succeeded") >= 2, timeout=30)
    conn = await aio_pika.connect(node.url)
    try:
        assert await queue_depth(conn, "timeouts") == 0
        assert await queue_depth(conn, "timeouts.dlq") == 0
    finally:
        await conn.close()
    assert calls[0] == (1, False)
    assert (1, True) in calls  # redelivered after the broker closed the channel
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("not acknowledged within its consumer_timeout" in m for m in said)


async def test_3_10_accepts_x_consumer_timeout_and_ignores_it(node, caplog):
    # rabbitq._amqp.brokers: 3.10-3.11 accept the consumer argument and keep the broker-wide
    # timeout; the worker asks for 34 s (a 30 s handler, over its margin), the broker
    # still closes the channel after 1 s
    caplog.set_level(logging.INFO)
    app = App(queue="timeouts-arg", exchange="x", url=node.url, retry=RetryPolicy(delays=()))
    calls: list[bool] = []

    @app.handler(Report, timeout=30)
    async def build(report: Report, ctx: Context) -> None:
        calls.append(ctx.redelivered)
        if len(calls) == 1:
            await asyncio.sleep(CONSUMER_TIMEOUT_MS / 1000 * 3)

    rec = Recorder()
    worker = Worker(app, url=node.url, hooks=rec, grace_period=5, consumer_timeout=1)
    async with running(worker):
        assert worker.consumer.arguments == {"x-consumer-timeout": 34_000}
        async with app.publisher() as pub:
            await pub.publish(Report(n=1))
        await wait_for(lambda: rec.count("succeeded") >= 1, timeout=30)
    assert calls[:2] == [False, True]  # redelivered: the argument changed nothing on 3.10
    said = [r.getMessage() for r in caplog.records]
    assert any("x-consumer-timeout" in m and "this broker ignores it" in m for m in said)
