"""Deliveries held past every bound (worker/held.py), without a broker: the bound of a
handler's delivery, and the readiness line they make."""

from __future__ import annotations

import time

from rabbitq import App, Message
from rabbitq._worker.dispatch import new_job
from rabbitq._worker.held import Held, bound_of, held_reason
from rabbitq.outcome import ACK, Outcome
from rabbitq.testing import FakeDelivery


class Ping(Message, type="held.ping"):
    n: int = 0


def test_a_delivery_may_take_its_middleware_and_handler_time_and_a_batch_wait():
    app = App(queue="held", timeout=2.0)

    @app.handler(Ping)
    async def ping(msg: Ping) -> None: ...

    class Many(Message, type="held.many"):
        n: int = 0

    @app.batch_handler(Many, max_size=10, max_wait=0.5)
    async def many(msgs) -> None: ...

    class Free(Message, type="held.free"):
        n: int = 0

    @app.handler(Free, timeout=None)
    async def free(msg: Free) -> None: ...

    assert bound_of(app.handlers["held.ping"]) == 4.0
    assert bound_of(app.handlers["held.many"]) == 4.5
    assert bound_of(app.handlers["held.free"]) is None
    assert bound_of(None) is None


def test_only_deliveries_past_their_deadline_make_the_worker_unready():
    assert held_reason([], 10.0) is None
    assert held_reason([10.5, 11.0], 10.0) is None
    reason = held_reason([4.0, 9.0, 11.0], 10.0)
    assert reason is not None and reason.startswith("2 deliveries held unsettled")
    assert "the longest 6s past" in reason and "\n" not in reason


async def test_a_delivery_is_watched_from_the_stage_until_it_is_settled():
    app = App(queue="held", timeout=0.01)

    @app.handler(Ping)
    async def ping(msg: Ping) -> None: ...

    held = Held(grace=0.0)
    job = new_job(app.handlers, "held", FakeDelivery(body=b'{"n": 1}', type="held.ping"))

    async def rest(job):
        return Outcome(ACK, job.type_name, job.attempt)

    await held(job, rest)
    time.sleep(0.05)  # its deadline (0.02 s) passes
    assert held.health() is not None
    held.settled(job)
    assert held.health() is None
