"""Concurrency: prefetch bounds the handlers in flight, sync handlers run in threads
while the event loop stays responsive, and a per-handler timeout is a failed attempt."""

from __future__ import annotations

import asyncio
import threading
import time

from rabbitq import Message, RetryPolicy, Worker
from tests.helpers import (
    Recorder,
    declare_topology,
    drain_queue,
    running,
    wait_for,
)


class AsyncJob(Message, type="test.concurrency.async-job"):
    n: int


class SyncJob(Message, type="test.concurrency.sync-job"):
    n: int


class ThreadJob(Message, type="test.concurrency.thread-job"):
    n: int


class SlowJob(Message, type="test.concurrency.slow-job"):
    n: int


class Gauge:
    """Handlers running now and the most ever running at once (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.max = 0
        self.done = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.max = max(self.max, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1
            self.done += 1


async def publish_waiting(connection, app, messages) -> None:
    """Declare the topology and publish, so that all messages wait before the worker starts."""
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        await pub.publish_many(messages)


async def test_prefetch_of_five_runs_exactly_five_async_handlers_at_once(make_app, connection):
    app = make_app(prefetch=5)
    gauge = Gauge()

    @app.handler(AsyncJob)
    async def handle(msg: AsyncJob) -> None:
        gauge.enter()
        try:
            await asyncio.sleep(0.3)
        finally:
            gauge.leave()

    await publish_waiting(connection, app, [AsyncJob(n=n) for n in range(30)])
    async with running(Worker(app)):
        await wait_for(lambda: gauge.done == 30, timeout=30)
    assert gauge.max == 5


async def test_sync_handlers_are_also_bounded_by_prefetch(make_app, connection):
    app = make_app(prefetch=5)
    gauge = Gauge()

    @app.handler(SyncJob)
    def handle(msg: SyncJob) -> None:
        gauge.enter()
        try:
            time.sleep(0.3)
        finally:
            gauge.leave()

    await publish_waiting(connection, app, [SyncJob(n=n) for n in range(20)])
    # More threads than prefetch, so that only prefetch can be what bounds them.
    async with running(Worker(app, sync_workers=20)):
        await wait_for(lambda: gauge.done == 20, timeout=30)
    assert gauge.max == 5


BLOCK = 1.0
"""Seconds each sync handler blocks its thread in the event-loop test."""


async def test_a_sync_handler_runs_off_the_event_loop_which_keeps_ticking(make_app, connection):
    app = make_app(prefetch=4)
    loop_thread = threading.current_thread()
    handler_threads: set[str] = set()
    ran_on_loop_thread: list[bool] = []
    blocking = threading.Event()

    @app.handler(ThreadJob)
    def handle(msg: ThreadJob) -> None:
        handler_threads.add(threading.current_thread().name)
        ran_on_loop_thread.append(threading.current_thread() is loop_thread)
        blocking.set()
        time.sleep(BLOCK)  # blocks its thread; must not block the loop

    ticks: list[float] = []

    async def heartbeat() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    await publish_waiting(connection, app, [ThreadJob(n=n) for n in range(8)])
    beat = asyncio.create_task(heartbeat())
    try:
        async with running(Worker(app)):
            await wait_for(blocking.is_set, timeout=10)
            started = time.monotonic()
            await wait_for(lambda: len(ran_on_loop_thread) == 8, timeout=30)
            # Stay until the last handlers have slept, so their whole run is covered.
            await asyncio.sleep(BLOCK)
            ended = time.monotonic()
    finally:
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)

    assert ran_on_loop_thread == [False] * 8
    assert loop_thread is threading.main_thread()
    assert all(name.startswith("rabbitq-handler") for name in handler_threads)
    window = [t for t in ticks if started <= t <= ended]
    gaps = [b - a for a, b in zip(window, window[1:], strict=False)]
    # ~2 s of handlers blocking in time.sleep: the loop still ticked every 10 ms or so. A
    # handler blocking the loop stops it for BLOCK seconds; half of that leaves room for a
    # busy machine's pauses.
    assert len(window) > 30
    assert max(gaps) < BLOCK / 2


async def test_an_async_handler_exceeding_its_timeout_is_retried_then_dead_lettered(
    make_app, connection
):
    app = make_app(retry=RetryPolicy(delays=(0.2,)))
    attempts: list[int] = []

    @app.handler(SlowJob, timeout=0.2)
    async def handle(msg: SlowJob, ctx) -> None:
        attempts.append(ctx.attempt)
        await asyncio.sleep(30)

    rec = Recorder()
    async with running(Worker(app, hooks=rec)):
        async with app.publisher() as pub:
            await pub.publish(SlowJob(n=1))
        await wait_for(lambda: rec.count("dead_lettered") == 1, timeout=20)

    assert attempts == [1, 2]
    assert rec.events == [
        ("retried", "test.concurrency.slow-job", "200ms"),
        ("dead_lettered", "test.concurrency.slow-job", "exhausted"),
    ]
    [dead] = await drain_queue(connection, app.topology().dlq.name)
    assert dead.headers["rabbitq-reason"] == "exhausted"
    assert dead.headers["rabbitq-attempt"] == 2
    assert "HandlerTimeout" in dead.headers["rabbitq-error"]
