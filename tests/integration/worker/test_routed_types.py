"""A worker handles a message only as a type its queue is bound for, whatever route it
came by (issue 33, item 6): through the app's exchange with a ``type`` property that
names another type than its routing key, or through the delay ladder's last hop
(``rabbitq.delay.deliver``, which any producer allowed to delay can write to)."""

from __future__ import annotations

import aio_pika
import pytest

from rabbitq import Message, Worker
from rabbitq.ladder.plan import DELAY_TO, DELIVER_EXCHANGE

from ...helpers import Recorder, drain_queue, running, wait_for

pytestmark = pytest.mark.broker


class Capture(Message, type="test.routed.capture"):
    n: int


class Refund(Message, type="test.routed.refund"):
    n: int


def raw(type_name: str, headers: dict[str, str] | None = None) -> aio_pika.Message:
    return aio_pika.Message(b'{"n": 7}', type=type_name, headers=headers or {})


async def test_a_message_routed_as_one_type_but_naming_another_runs_neither_handler(
    make_app, connection
):
    app = make_app()
    ran: list[str] = []

    @app.handler(Capture)
    async def capture(msg: Capture) -> None:
        ran.append("capture")

    @app.handler(Refund)
    async def refund(msg: Refund) -> None:
        ran.append("refund")

    hooks = Recorder()
    async with running(Worker(app, hooks=hooks)):
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(app.exchange, ensure=False)
        # Routed by the binding for capture (a producer allowed that key only, say),
        # claiming to be a refund.
        await exchange.publish(raw(Refund.type_name()), Capture.type_name(), mandatory=True)
        await exchange.publish(raw(Capture.type_name()), Capture.type_name(), mandatory=True)
        await wait_for(lambda: hooks.count("dead_lettered") == 1 and ran, timeout=30)
        await channel.close()
    assert ran == ["capture"], ran  # before: ["refund", "capture"]
    [dead] = await drain_queue(connection, f"{app.queue}.dlq")
    assert dead.headers["rabbitq-reason"] == "unknown-type"
    assert "routed by key 'test.routed.capture'" in str(dead.headers["rabbitq-error"])


async def test_the_delay_ladder_delivers_only_a_type_the_queue_is_bound_for(make_app, connection):
    app = make_app()
    ran: list[str] = []

    @app.handler(Capture)
    async def capture(msg: Capture) -> None:
        ran.append("capture")

    hooks = Recorder()
    async with running(Worker(app, hooks=hooks)):  # declares the ladder and its binding
        channel = await connection.channel(publisher_confirms=True)
        deliver = await channel.get_exchange(DELIVER_EXCHANGE, ensure=False)
        for type_name in (Refund.type_name(), Capture.type_name()):
            await deliver.publish(raw(type_name, {DELAY_TO: app.queue}), "", mandatory=True)
        await wait_for(lambda: hooks.count("dead_lettered") == 1 and ran, timeout=30)
        await channel.close()
    assert ran == ["capture"]
    [dead] = await drain_queue(connection, f"{app.queue}.dlq")
    assert dead.headers["rabbitq-reason"] == "unknown-type"
    assert dead.type == Refund.type_name()
