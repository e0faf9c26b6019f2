"""Faulty middleware in a real worker (issue 40, item 2; docs/middleware.md, "Rules that
keep the promises"): whatever a middleware does wrong, every delivery is settled.

40 messages through a worker with a prefetch of 8 and one faulty middleware each:
every message ends exactly once, handled or in the DLQ, the handler runs as often as
the case says, and the worker then takes 10 more messages (it did not stop at
``prefetch`` unsettled deliveries). The counts are read after the work settles.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from rabbitq import Job, Message, Metrics, RetryPolicy, Worker
from tests.helpers import Recorder, drain_queue, running, wait_for

pytestmark = pytest.mark.broker

MESSAGES = 40
LATER = 10  # published after the 40: the worker must still take them
PREFETCH = 8
TIMEOUT = 0.5  # the handler's timeout, which bounds the middleware too


class Work(Message, type="test.mwfault.work"):
    n: int


async def forgets_return(job: Job, call_next):
    await call_next(job)  # no return: the common slip


async def returns_none(job: Job, call_next):
    return None


async def returns_a_string(job: Job, call_next):
    return "ok"


async def returns_unawaited(job: Job, call_next):
    return call_next(job)  # an async def returning the awaitable, not the outcome


async def raises(job: Job, call_next):
    raise RuntimeError("raises: middleware bug")


async def hangs(job: Job, call_next):
    await asyncio.sleep(3600)
    return await call_next(job)


async def calls_next_twice(job: Job, call_next):
    await call_next(job)
    return await call_next(job)


def passing_later(faulty):
    """``faulty`` for the first 40 messages; the 10 published after them pass through."""

    async def middleware(job: Job, call_next):
        if job.message.n >= MESSAGES:
            return await call_next(job)
        return await faulty(job, call_next)

    middleware.__qualname__ = faulty.__name__
    return middleware


# (middleware, handler runs of the 40, handled of the 40, dead-lettered of the 40)
CASES = {
    "forgets_return": (forgets_return, MESSAGES, MESSAGES, 0),
    "returns_unawaited": (returns_unawaited, MESSAGES, MESSAGES, 0),
    "calls_next_twice": (calls_next_twice, MESSAGES, MESSAGES, 0),
    "returns_none": (returns_none, 0, 0, MESSAGES),
    "returns_a_string": (returns_a_string, 0, 0, MESSAGES),
    "raises": (raises, 0, 0, MESSAGES),
    "hangs": (hangs, 0, 0, MESSAGES),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_every_message_ends_once_whatever_the_middleware_does(case, make_app, connection):
    faulty, runs, handled_count, dead_count = CASES[case]
    app = make_app(
        retry=RetryPolicy(delays=(0.1,)), timeout=TIMEOUT, prefetch=PREFETCH,
        middleware=[passing_later(faulty)],
    )  # fmt: skip
    ran: list[int] = []

    @app.handler(Work)
    async def work(msg: Work) -> None:
        ran.append(msg.n)

    rec = Recorder()
    worker = Worker(app, hooks=rec)
    async with running(worker):
        async with app.publisher() as pub:
            for n in range(MESSAGES):
                await pub.publish(Work(n=n))
        first = lambda: rec.count("succeeded") + rec.count("dead_lettered") >= MESSAGES  # noqa: E731
        await settle(first)
        handled = rec.count("succeeded")
        async with app.publisher() as pub:
            for n in range(MESSAGES, MESSAGES + LATER):
                await pub.publish(Work(n=n))
        await settle(lambda: len([n for n in ran if n >= MESSAGES]) >= LATER)
        await asyncio.sleep(0.3)  # anything more would show now
        health = worker.health()

    dead = await drain_queue(connection, f"{app.queue}.dlq")
    dead_ns = sorted(orjson.loads(m.body)["n"] for m in dead)
    left = await drain_queue(connection, app.queue)
    counts = {
        "runs": len([n for n in ran if n < MESSAGES]),
        "handled": handled,
        "dead": len(dead_ns),
        "later": len([n for n in ran if n >= MESSAGES]),
        "left": len(left),
    }
    assert counts == {
        "runs": runs, "handled": handled_count, "dead": dead_count, "later": LATER, "left": 0,
    }, str(counts)  # fmt: skip
    assert sorted(n for n in ran if n < MESSAGES) == sorted(set(n for n in ran if n < MESSAGES))
    if dead_count:
        assert dead_ns == list(range(MESSAGES))  # each once
        errors = {m.headers["rabbitq-error"] for m in dead}
        assert all(case in e for e in errors), errors  # names the middleware
        assert {m.headers["rabbitq-reason"] for m in dead} == {"exhausted"}  # two attempts
    assert health is None


async def settle(predicate) -> None:
    """Wait for ``predicate`` (the counts are asserted after, whatever they are)."""
    try:
        await wait_for(predicate, timeout=30)
    except AssertionError:
        pass


class Stubborn:
    """Ignores the cancellation its timeout sends, until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def __call__(self, job: Job, call_next):
        while not self.release.is_set():
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                pass
        return await call_next(job)


async def test_readiness_and_in_flight_see_deliveries_held_past_every_bound(make_app):
    stubborn = Stubborn()
    app = make_app(timeout=0.2, prefetch=PREFETCH, middleware=[stubborn])
    ran: list[int] = []

    @app.handler(Work)
    async def work(msg: Work) -> None:
        ran.append(msg.n)

    metrics = Metrics()
    worker = Worker(app, hooks=metrics)
    worker.held.grace = 0.3
    in_flight = lambda: metrics.registry.get_sample_value(  # noqa: E731
        "rabbitq_messages_in_flight", {"queue": app.queue}
    )
    async with running(worker):
        assert worker.health() is None
        async with app.publisher() as pub:
            for n in range(MESSAGES):
                await pub.publish(Work(n=n))
        # the 8 taken are stuck: each past its deadline (they arrive a little apart)
        await settle(lambda: (worker.health() or "").startswith(f"{PREFETCH} deliveries"))
        held, counted = worker.health(), in_flight()
        stubborn.release.set()
        await settle(lambda: len(ran) >= MESSAGES)
        await settle(lambda: worker.health() is None)
        after, counted_after = worker.health(), in_flight()
    assert held is not None and held.startswith(f"{PREFETCH} deliveries held unsettled"), held
    assert counted == PREFETCH
    assert sorted(ran) == list(range(MESSAGES))  # released, each handled once
    assert (after, counted_after) == (None, 0)


async def test_a_stage_that_fails_settles_its_delivery_as_a_failed_attempt(make_app, caplog):
    """The last resort (worker/lifecycle.py): the stage list raising, or answering
    something other than an outcome, settles the delivery as a failed attempt."""
    app = make_app(retry=RetryPolicy(delays=(0.1,)), prefetch=PREFETCH)
    ran: list[int] = []

    @app.handler(Work)
    async def work(msg: Work) -> None:
        ran.append(msg.n)

    rec = Recorder()
    worker = Worker(app, hooks=rec)
    run = worker.pipeline.run

    async def broken(job: Job):
        if job.attempt == 1:  # a bug in a stage, on every first attempt
            if orjson.loads(job.body)["n"] % 2:
                raise RuntimeError("stage bug")
            return None
        return await run(job)

    worker.pipeline.run = broken
    async with running(worker):
        async with app.publisher() as pub:
            for n in range(MESSAGES):
                await pub.publish(Work(n=n))
        await settle(lambda: len(ran) >= MESSAGES)
        await asyncio.sleep(0.3)
    assert sorted(ran) == list(range(MESSAGES))  # each once, on its second attempt
    assert (rec.count("retried"), rec.count("succeeded")) == (MESSAGES, MESSAGES)
    assert "settled as a failed attempt" in caplog.text


async def test_a_delivery_that_cannot_start_is_returned_to_its_queue(make_app, caplog):
    """The last resort where a delivery arrives: a stage's ``arrive`` that raises returns
    the delivery (it comes back, redelivered) instead of leaving it unsettled."""
    app = make_app(prefetch=PREFETCH)
    ran: list[int] = []

    @app.handler(Work)
    async def work(msg: Work) -> None:
        ran.append(msg.n)

    def arrive(job: Job):
        if not job.redelivered:
            raise RuntimeError("arrive bug")

    rec = Recorder()
    worker = Worker(app, hooks=rec)
    worker.pipeline.arrivals = (*worker.pipeline.arrivals, arrive)
    async with running(worker):
        async with app.publisher() as pub:
            for n in range(MESSAGES):
                await pub.publish(Work(n=n))
        await settle(lambda: len(ran) >= MESSAGES)
        await asyncio.sleep(0.3)
    assert sorted(ran) == list(range(MESSAGES))  # each once, when redelivered
    assert (rec.count("requeued"), rec.count("succeeded")) == (MESSAGES, MESSAGES)
    assert "could not start it; returning it" in caplog.text
