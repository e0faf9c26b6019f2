"""Batch handlers in a real worker: batches cut at max_size under load, partial failures
through the retry path, the size histogram, and a partial batch run (not lost) on stop."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from rabbitq import BatchResult, ConfigurationError, Message, Metrics, RetryPolicy, Worker
from tests.helpers import Recorder, declare_topology, drain_queue, running, wait_for


class Event(Message, type="test.batches.event"):
    n: int


class Batches(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[tuple[int, str]] = []

    def batch_flushed(self, queue: str, type_name: str, size: int, trigger: str) -> None:
        self.flushed.append((size, trigger))


async def test_batches_fill_to_max_size_and_only_the_named_messages_are_retried(
    make_app, connection
):
    app = make_app(prefetch=40, retry=RetryPolicy(delays=(0.2,)))
    handled: list[int] = []
    failed_once: set[int] = set()

    @app.batch_handler(Event, max_size=10, max_wait=0.2)
    async def store(msgs: list[Event]) -> BatchResult:
        result = BatchResult()
        for m in msgs:
            if m.n % 7 == 0:
                result.dead_letter(m, "never")
            elif m.n % 5 == 0 and m.n not in failed_once:
                failed_once.add(m.n)  # its first attempt fails
                result.retry(m)
            else:
                handled.append(m.n)
        return result

    await declare_topology(connection, app)
    async with app.publisher() as pub:
        await pub.publish_many([Event(n=i) for i in range(1, 51)])
    registry = CollectorRegistry()
    hooks = Batches()
    async with running(Worker(app, hooks=[hooks, Metrics(registry)])):
        await wait_for(lambda: hooks.count("succeeded") + hooks.count("dead_lettered") == 50)
    # all 50 waited in the queue before the worker started: full batches of 10 first
    assert hooks.flushed[:5] == [(10, "full")] * 5
    sevens = [n for n in range(1, 51) if n % 7 == 0]
    assert sorted(handled) == [n for n in range(1, 51) if n % 7]
    assert hooks.count("retried") == len([n for n in range(1, 51) if n % 5 == 0 and n % 7])
    dead = await drain_queue(connection, app.topology().dlq.name)
    assert sorted(int(m.body.split(b":")[1].rstrip(b"}")) for m in dead) == sevens
    assert {m.headers["rabbitq-reason"] for m in dead} == {"permanent"}
    count = registry.get_sample_value(
        "rabbitq_batch_size_count", {"queue": app.queue, "type": "test.batches.event"}
    )
    assert count == len(hooks.flushed)
    labels = {"queue": app.queue, "type": "test.batches.event", "trigger": "full"}
    full = registry.get_sample_value("rabbitq_batches_total", labels)
    assert full is not None and full >= 5


async def test_a_partial_batch_is_run_when_the_worker_stops_not_held_or_lost(make_app):
    app = make_app(prefetch=20)
    handled: list[int] = []

    @app.batch_handler(Event, max_size=10, max_wait=3600)  # never full, never due
    async def store(msgs: list[Event]) -> None:
        handled.extend(m.n for m in msgs)

    hooks = Batches()
    async with running(Worker(app, hooks=hooks)) as worker:
        async with app.publisher() as pub:
            for i in range(3):
                await pub.publish(Event(n=i))
        await wait_for(lambda: worker.batches.waiting == 3)
        assert handled == []
    assert sorted(handled) == [0, 1, 2]
    assert hooks.flushed == [(3, "stopping")] and hooks.count("succeeded") == 3


async def test_a_worker_whose_prefetch_cannot_hold_a_batch_does_not_start(make_app):
    app = make_app(prefetch=100)

    @app.batch_handler(Event, max_size=50)
    async def store(msgs: list[Event]) -> None: ...

    with pytest.raises(ConfigurationError, match=r"max_size=50, above the prefetch \(20\)"):
        Worker(app, prefetch=20)


async def test_a_batch_still_running_after_the_grace_period_goes_back_to_its_queue(
    make_app, connection
):
    app = make_app(prefetch=20)
    started = []

    @app.batch_handler(Event, max_size=5, max_wait=0.05)
    async def store(msgs: list[Event]) -> None:
        started.append(len(msgs))
        await asyncio.sleep(3600)

    hooks = Batches()
    async with running(Worker(app, hooks=hooks, grace_period=0.2)):
        async with app.publisher() as pub:
            await pub.publish_many([Event(n=i) for i in range(5)])
        await wait_for(lambda: started == [5])
    assert hooks.count("requeued") == 5 and hooks.count("succeeded") == 0
    back = await drain_queue(connection, app.queue)
    assert len(back) == 5
