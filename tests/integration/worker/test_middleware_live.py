"""User middleware in a real worker (docs/middleware.md): its answers are settled like
a handler's (a dead letter confirmed in the DLQ, a requeue back in the queue), and an
exception it raises is a failed attempt, so every message ends once, handled or dead."""

from __future__ import annotations

import pytest

from rabbitq import Job, Message, RetryPolicy, Worker
from tests.helpers import Recorder, drain_queue, running, wait_for

pytestmark = pytest.mark.broker


class Order(Message, type="test.mw.order"):
    n: int


class Policy:
    """Dead-letters n % 5 == 0, requeues each n % 5 == 1 once, raises for n % 5 == 2 on
    its first attempt; the rest go to the handler."""

    def __init__(self) -> None:
        self.requeued: set[int] = set()

    async def __call__(self, job: Job, call_next):
        n = job.message.n
        if n % 5 == 0:
            return job.dead_letter("refused", f"order {n} refused by policy")
        if n % 5 == 1 and n not in self.requeued:
            self.requeued.add(n)
            return job.requeue()
        if n % 5 == 2 and job.attempt == 1:
            raise RuntimeError(f"policy lookup failed for {n}")
        return await call_next(job)


async def test_every_message_ends_once_handled_or_dead_through_a_middleware(
    make_app, connection
):
    policy = Policy()
    app = make_app(retry=RetryPolicy(delays=(0.1,)), middleware=[policy])
    handled: list[int] = []

    @app.handler(Order)
    async def order(msg: Order) -> None:
        handled.append(msg.n)

    rec = Recorder()
    async with running(Worker(app, hooks=rec)):
        async with app.publisher() as pub:
            for n in range(50):
                await pub.publish(Order(n=n))
        await wait_for(lambda: len(handled) + rec.count("dead_lettered") >= 50, timeout=30)

    dead = await drain_queue(connection, f"{app.queue}.dlq")
    dead_ns = sorted(int(m.body.decode().split(":")[1].strip(" }")) for m in dead)
    assert dead_ns == [n for n in range(50) if n % 5 == 0]
    assert {m.headers["rabbitq-reason"] for m in dead} == {"refused"}
    assert sorted(handled) == [n for n in range(50) if n % 5 != 0]  # each once
    assert policy.requeued == {n for n in range(50) if n % 5 == 1}
    assert rec.count("retried") == 10  # the n % 5 == 2 that raised, retried once each
