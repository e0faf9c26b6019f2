"""consume: N persistent ~200-byte typed messages, pre-published; a no-op async handler;
prefetch 256; messages per second from the first delivery to the last ack.

Baseline: the plainest correct aio-pika consumer: decode the JSON, ``ack()`` each one.
"""

from __future__ import annotations

import asyncio

from aio_pika.abc import AbstractIncomingMessage

from rabbitq import Worker
from rabbitq.hooks import Hooks

from .common import BenchJob, Config, bench_app, clock, job, loads, prefill, rate, topology, unique

PREFETCH = 256


async def _prepared(cfg: Config):
    app = bench_app(unique("consume"), prefetch=PREFETCH)
    messages = [job(n) for n in range(cfg.n)]
    return app, messages


async def baseline(cfg: Config) -> dict[str, float]:
    app, messages = await _prepared(cfg)
    async with topology(cfg.url, app) as conn:
        await prefill(conn, app.queue, messages)
        channel = await conn.channel()
        await channel.set_qos(prefetch_count=PREFETCH)
        queue = await channel.get_queue(app.queue)
        done = asyncio.Event()
        first: float | None = None
        last: float | None = None
        count = 0

        async def on_message(message: AbstractIncomingMessage) -> None:
            nonlocal first, last, count
            if first is None:
                first = clock()
            loads(message.body)
            await message.ack()
            count += 1
            if count == cfg.n:
                last = clock()
                done.set()

        tag = await queue.consume(on_message)
        await asyncio.wait_for(done.wait(), 300)
        await queue.cancel(tag)
        await channel.close()
    return {"msg/s": rate(cfg.n, first, last)}


class _Clock(Hooks):
    """First delivery and last settlement, from the worker's own hooks."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self.done = asyncio.Event()

    def received(self, queue: str, type_name: str) -> None:
        if self.first is None:
            self.first = clock()

    def succeeded(self, queue: str, type_name: str, duration: float) -> None:
        self.count += 1
        if self.count == self.n:
            self.last = clock()
            self.done.set()


async def candidate(cfg: Config) -> dict[str, float]:
    app, messages = await _prepared(cfg)

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:
        pass

    hooks = _Clock(cfg.n)
    async with topology(cfg.url, app) as conn:
        await prefill(conn, app.queue, messages)
        worker = Worker(app, url=cfg.url, hooks=hooks)
        task = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(hooks.done.wait(), 300)
        finally:
            worker.stop()
            await task
    # succeeded() fires just before the ack is written: the last ack follows within
    # the same loop iteration.
    return {"msg/s": rate(cfg.n, hooks.first, hooks.last)}
