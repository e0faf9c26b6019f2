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


async def test_a_worker_without_metrics_says_whether_it_is_ready_and_why_not(make_app):
    app = make_app()

    @app.handler(Charge)
    async def charge(msg: Charge) -> None: ...

    worker = Worker(app)  # no hooks at all: readiness is the worker's own
    assert worker.health() == "starting: not consuming yet"
    async with running(worker):
        assert worker.health() is None and worker.ready.is_set()
        worker.consumer.pause("copies_held", f"holding messages of {app.queue}: test")
        assert worker.health() == f"holding messages of {app.queue}: test"
        worker.consumer.resume("copies_held")
        await wait_for(lambda: worker.health() is None)
    assert worker.health() == "not consuming (stopped or draining)"
