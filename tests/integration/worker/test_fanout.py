"""A retry reaches only the queue that failed (docs/contract.md, guarantee 3): other services bound
to the same type on the same exchange get each message exactly once, however often the
first service retries it."""

from __future__ import annotations

import asyncio
from collections import Counter

import aio_pika
import pytest

from rabbitq import Context, Message, RetryPolicy, Worker
from tests.helpers import Recorder, drain_queue, queue_depth, running, wait_for

pytestmark = pytest.mark.broker


class OrderPlaced(Message, type="test.fanout.order-placed"):
    order: str
    fail_times: int  # how many attempts the flaky service fails before it succeeds


async def bind_plain_queue(connection, exchange: str, routing_key: str) -> str:
    """A plain (non-rabbitq) queue bound to ``exchange``; deleted with the connection."""
    channel = await connection.channel()
    x = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
    queue = await channel.declare_queue(exclusive=True)
    await queue.bind(x, routing_key=routing_key)
    await channel.close()
    return queue.name


async def test_a_plain_queue_on_the_same_type_gets_each_message_once_however_often_it_is_retried(
    make_app, connection
):
    # Three tries: "o-ok" succeeds at once, "o-flaky" on the third attempt, and "o-bad"
    # fails all three and is dead-lettered.
    flaky = make_app(retry=RetryPolicy(delays=(0.1, 0.2)))
    attempts: Counter[str] = Counter()

    @flaky.handler(OrderPlaced)
    async def on_order(msg: OrderPlaced, ctx: Context) -> None:
        attempts[msg.order] += 1
        if ctx.attempt <= msg.fail_times:
            raise RuntimeError(f"{msg.order} failed attempt {ctx.attempt}")

    other = await bind_plain_queue(connection, flaky.exchange, "test.fanout.order-placed")
    # Anything at all that passes through the exchange, whatever its routing key.
    everything = await bind_plain_queue(connection, flaky.exchange, "#")

    rec = Recorder()
    orders = [
        OrderPlaced(order="o-ok", fail_times=0),
        OrderPlaced(order="o-flaky", fail_times=2),
        OrderPlaced(order="o-bad", fail_times=99),
    ]
    async with running(Worker(flaky, hooks=rec)):
        async with flaky.publisher() as pub:
            ids = [await pub.publish(order) for order in orders]
        await wait_for(
            lambda: rec.count("succeeded") == 2 and rec.count("dead_lettered") == 1, timeout=15
        )
        # Longer than the longest tier: a stray copy would have arrived by now.
        await asyncio.sleep(0.5)

    assert attempts == {"o-ok": 1, "o-flaky": 3, "o-bad": 3}
    assert rec.count("retried") == 4
    assert await queue_depth(connection, flaky.topology().dlq.name) == 1

    for queue in (other, everything):
        received = await drain_queue(connection, queue)
        assert sorted(m.message_id for m in received) == sorted(ids), queue
        # The originals, never a retry copy.
        assert all("rabbitq-attempt" not in m.headers for m in received)
        assert {m.routing_key for m in received} == {"test.fanout.order-placed"}


async def test_a_second_service_handles_each_message_once_while_the_first_keeps_retrying(
    make_app, connection
):
    payments = make_app(retry=RetryPolicy(delays=(0.1, 0.1, 0.1)))
    emails = make_app(exchange=payments.exchange)  # the same exchange, its own queue
    payment_calls: Counter[str] = Counter()
    email_calls: Counter[str] = Counter()

    @payments.handler(OrderPlaced)
    async def charge(msg: OrderPlaced, ctx: Context) -> None:
        payment_calls[ctx.message_id] += 1
        if ctx.attempt <= msg.fail_times:
            raise RuntimeError("payment provider down")

    @emails.handler(OrderPlaced)
    async def confirm(msg: OrderPlaced, ctx: Context) -> None:
        email_calls[ctx.message_id] += 1

    pay_rec, mail_rec = Recorder(), Recorder()
    async with running(Worker(payments, hooks=pay_rec)), running(Worker(emails, hooks=mail_rec)):
        async with payments.publisher() as pub:
            ids = [await pub.publish(OrderPlaced(order=f"o-{n}", fail_times=n)) for n in range(5)]
        # o-0..o-3 succeed on attempt n+1; o-4 fails all four attempts.
        await wait_for(
            lambda: pay_rec.count("succeeded") == 4 and pay_rec.count("dead_lettered") == 1,
            timeout=15,
        )
        await wait_for(lambda: mail_rec.count("succeeded") == 5, timeout=15)
        await asyncio.sleep(0.5)  # a duplicate for the second service would show by now

    assert sorted(payment_calls.values()) == [1, 2, 3, 4, 4]
    assert email_calls == dict.fromkeys(ids, 1)
    assert mail_rec.events == [("succeeded", "test.fanout.order-placed")] * 5
    for spec in emails.topology().queues:
        assert await queue_depth(connection, spec.name) == 0, spec.name
