"""Follow-ups through a real worker and broker: sent after success with the incoming
correlation id and the causation header, never for a failed attempt."""

from __future__ import annotations

import pytest

from rabbitq import App, Context, Message, RetryPolicy, Worker
from rabbitq.effects.followups import CAUSATION_ID

from ..helpers import Recorder, drain_queue, running, wait_for

pytestmark = pytest.mark.broker


class Order(Message, type="live.order"):
    n: int
    fail: bool = False


class Shipped(Message, type="live.shipped"):
    n: int


async def test_a_follow_up_carries_correlation_and_causation_and_a_failure_sends_none(
    make_app, connection, uid
) -> None:
    app: App = make_app(retry=RetryPolicy(delays=()))

    @app.handler(Order)
    async def handle(msg: Order, ctx: Context) -> None:
        await ctx.publish(Shipped(n=msg.n))
        if msg.fail:
            raise RuntimeError("after publishing: the follow-up must not go out")

    channel = await connection.channel()
    sink = await channel.declare_queue(f"t.{uid}.shipped", durable=True)
    exchange = await channel.declare_exchange(app.exchange, "topic", durable=True)
    await sink.bind(exchange, routing_key="live.shipped")
    rec = Recorder()
    try:
        async with running(Worker(app, hooks=rec)):
            async with app.publisher() as pub:
                await pub.publish(Order(n=1), message_id="order-1", correlation_id="corr-9")
                await pub.publish(Order(n=2), message_id="order-2")
                await pub.publish(Order(n=3, fail=True), message_id="order-3")
            await wait_for(lambda: rec.count("succeeded") == 2 and rec.count("dead_lettered") == 1)
        shipped = await drain_queue(connection, sink.name)
        got = {m.correlation_id: m for m in shipped}
        assert sorted(got) == ["corr-9", "order-2"]  # none from the failed order-3
        assert got["corr-9"].headers[CAUSATION_ID] == "order-1"
        assert got["order-2"].headers[CAUSATION_ID] == "order-2"  # no correlation: its id
        assert all(m.type == "live.shipped" and m.message_id for m in shipped)
    finally:
        await sink.delete(if_unused=False, if_empty=False)
        await channel.close()
