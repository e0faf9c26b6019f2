"""Retries go through the TTL tiers in order, are held by the broker for each tier's
delay, and reach only the queue that failed (docs/contract.md, guarantees 2 and 3)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import aio_pika
import pytest

from rabbitq import Context, Message, RetryPolicy, Worker
from tests.helpers import Recorder, drain_queue, queue_depth, running, wait_for

pytestmark = pytest.mark.broker

# A message held by a retry queue comes back no sooner than the queue's TTL; below it
# only by the granularity of the clocks involved.
CLOCK_TOLERANCE = 0.05


class Charge(Message, type="test.tiers.charge"):
    order: str
    cents: int


class Capture(Message, type="test.tiers.capture"):
    order: str


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
async def test_a_handler_that_fails_twice_then_succeeds_goes_through_each_tier_in_order(
    make_app, connection, queue_type
):
    app = make_app(retry=RetryPolicy(delays=(0.3, 0.8)), queue_type=queue_type)
    calls: list[tuple[float, Context, Charge]] = []

    @app.handler(Charge)
    async def charge(msg: Charge, ctx: Context) -> None:
        calls.append((time.monotonic(), ctx, msg))
        if len(calls) <= 2:
            raise RuntimeError(f"card network timeout #{len(calls)}")

    rec = Recorder()
    sent = Charge(order="o-1", cents=1999)
    async with running(Worker(app, hooks=rec)):
        async with app.publisher() as pub:
            message_id = await pub.publish(sent, correlation_id="corr-1")
        await wait_for(lambda: rec.count("succeeded") == 1, timeout=15)

    assert rec.events == [
        ("retried", "test.tiers.charge", "300ms"),
        ("retried", "test.tiers.charge", "800ms"),
        ("succeeded", "test.tiers.charge"),
    ]
    assert len(calls) == 3
    (t1, c1, m1), (t2, c2, m2), (t3, c3, m3) = calls
    # Held by the broker for each tier's delay, not redelivered early.
    assert t2 - t1 >= 0.3 - CLOCK_TOLERANCE
    assert t3 - t2 >= 0.8 - CLOCK_TOLERANCE

    # The attempt number: absent on the first delivery, then 2 and 3.
    assert "rabbitq-attempt" not in c1.headers
    assert [c2.headers["rabbitq-attempt"], c3.headers["rabbitq-attempt"]] == [2, 3]
    assert [c.attempt for c in (c1, c2, c3)] == [1, 2, 3]
    assert {c.max_attempts for c in (c1, c2, c3)} == {3}

    # Each retry copy says why the previous attempt failed.
    assert "rabbitq-error" not in c1.headers
    assert c2.headers["rabbitq-error"] == "RuntimeError: card network timeout #1"
    assert c3.headers["rabbitq-error"] == "RuntimeError: card network timeout #2"

    # Each copy came back from its own tier, expired there and dead-lettered by the broker.
    assert c2.headers["x-death"][0]["queue"] == f"{app.queue}.retry.300ms"
    assert c3.headers["x-death"][0]["queue"] == f"{app.queue}.retry.800ms"
    assert {c.headers["x-death"][0]["reason"] for c in (c2, c3)} == {"expired"}

    # Same message every time: id, correlation id, type and body.
    assert [c.message_id for c in (c1, c2, c3)] == [message_id] * 3
    assert [c.correlation_id for c in (c1, c2, c3)] == ["corr-1"] * 3
    assert [c.type for c in (c1, c2, c3)] == ["test.tiers.charge"] * 3
    assert [m1, m2, m3] == [sent] * 3

    # Nothing left behind anywhere.
    for spec in app.topology().queues:
        assert await queue_depth(connection, spec.name) == 0, spec.name


async def test_a_retry_copy_keeps_the_message_and_waits_only_in_its_own_tier_queue(
    make_app, connection
):
    # Long tiers, so that the copy can be inspected while the broker holds it.
    app = make_app(retry=RetryPolicy(delays=(30, 60)))

    @app.handler(Capture)
    async def capture(msg: Capture) -> None:
        raise ConnectionError("acquirer unreachable")

    # What the topic exchange delivers for this type, for comparison: a plain queue
    # bound by another service.
    channel = await connection.channel()
    observer = await channel.declare_queue(exclusive=True)
    exchange = await channel.declare_exchange(
        app.exchange, aio_pika.ExchangeType.TOPIC, durable=True
    )
    await observer.bind(exchange, routing_key="test.tiers.capture")
    await channel.close()

    sent_at = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    body = b'{"order": "o-2",  "note": "extra fields and spacing are kept byte for byte"}'
    rec = Recorder()
    async with running(Worker(app, hooks=rec)):
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(app.exchange)
        await exchange.publish(
            aio_pika.Message(
                body,
                message_id="mid-2",
                correlation_id="corr-2",
                type="test.tiers.capture",
                timestamp=sent_at,
                content_type="application/json",
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                headers={"tenant": "acme"},
            ),
            routing_key="test.tiers.capture",
        )
        await channel.close()
        await wait_for(lambda: rec.count("retried") == 1, timeout=15)

    assert rec.events == [("retried", "test.tiers.capture", "30s")]
    # The copy waits in the first tier only; it never went back through the exchange.
    assert await queue_depth(connection, f"{app.queue}.retry.1m") == 0
    assert await queue_depth(connection, app.queue) == 0
    assert await queue_depth(connection, f"{app.queue}.dlq") == 0
    assert len(await drain_queue(connection, observer.name)) == 1
    [copy] = await drain_queue(connection, f"{app.queue}.retry.30s")

    assert copy.body == body
    assert copy.message_id == "mid-2"
    assert copy.correlation_id == "corr-2"
    assert copy.type == "test.tiers.capture"
    assert copy.timestamp == sent_at
    assert copy.content_type == "application/json"
    assert copy.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    assert copy.headers["tenant"] == "acme"
    assert copy.headers["rabbitq-attempt"] == 2
    assert copy.headers["rabbitq-error"] == "ConnectionError: acquirer unreachable"
    assert copy.headers["rabbitq-original-exchange"] == app.exchange
    assert copy.headers["rabbitq-original-routing-key"] == "test.tiers.capture"
    # Sent through the default exchange straight to the tier queue.
    assert copy.exchange == ""
    assert copy.routing_key == f"{app.queue}.retry.30s"
