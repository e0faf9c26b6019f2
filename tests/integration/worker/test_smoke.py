from decimal import Decimal

from rabbitq import Message, RetryPolicy, Worker
from tests.helpers import Recorder, drain_queue, running, wait_for


class Charge(Message, type="test.smoke.charge"):
    amount: Decimal


async def test_a_failing_message_is_retried_then_dead_lettered(make_app, connection):
    app = make_app(retry=RetryPolicy(delays=(0.2,)))

    @app.handler(Charge)
    async def charge(msg: Charge) -> None:
        raise RuntimeError("provider down")

    rec = Recorder()
    async with running(Worker(app, hooks=rec)):
        async with app.publisher() as pub:
            await pub.publish(Charge(amount=Decimal("9.99")))
        await wait_for(lambda: rec.count("dead_lettered") == 1)
    dead = await drain_queue(connection, app.topology().dlq.name)
    assert [m.headers["rabbitq-reason"] for m in dead] == ["exhausted"]
    assert rec.events[0] == ("retried", "test.smoke.charge", "200ms")
