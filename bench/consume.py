"""consume: N persistent ~200-byte typed messages, pre-published; a no-op async handler;
prefetch 256; messages per second from the first delivery to the last ack.

Baseline: the plainest correct aio-pika consumer: decode the JSON, ``ack()`` each one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aio_pika.abc import AbstractIncomingMessage

from rabbitq import App, Worker

from .common import (
    BenchJob,
    Config,
    SettleClock,
    bench_app,
    clock,
    connection,
    job,
    loads,
    prefill,
    rate,
    topology,
    unique,
)

PREFETCH = 256


async def baseline_on(cfg: Config, app: App) -> dict[str, float]:
    """Consume ``cfg.n`` messages already in ``app.queue`` with plain aio-pika."""
    async with connection(cfg.url, "rabbitq bench baseline") as conn:
        channel = await conn.channel()
        await channel.set_qos(prefetch_count=PREFETCH)
        queue = await channel.get_queue(app.queue)
        done = asyncio.Event()
        first: float | None = None
        last: float | None = None
        cpu = [0.0, 0.0]
        count = 0

        async def on_message(message: AbstractIncomingMessage) -> None:
            nonlocal first, last, count
            if first is None:
                first = clock()
                cpu[0] = time.process_time()
            loads(message.body)
            await message.ack()
            count += 1
            if count == cfg.n:
                last = clock()
                cpu[1] = time.process_time()
                done.set()

        tag = await queue.consume(on_message)
        await asyncio.wait_for(done.wait(), 300)
        await queue.cancel(tag)
    return figures(cfg.n, first, last, cpu)


def figures(n: int, first: float | None, last: float | None, cpu: list[float]) -> dict[str, float]:
    """The rate, and the client's CPU time per message (less sensitive to a busy machine)."""
    return {"msg/s": rate(n, first, last), "cpu us/msg": (cpu[1] - cpu[0]) / n * 1e6}


async def candidate_on(cfg: Config, app: App, **worker_options: Any) -> dict[str, float]:
    """Consume ``cfg.n`` messages already in ``app.queue`` with a rabbitq Worker."""

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:
        pass

    hooks = SettleClock(cfg.n)
    worker = Worker(app, url=cfg.url, hooks=hooks, **worker_options)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(hooks.done.wait(), 300)
    finally:
        worker.stop()
        await task
    return figures(cfg.n, hooks.first, hooks.last, hooks.cpu)


async def _measure(cfg: Config, side) -> dict[str, float]:
    app = bench_app(unique("consume"), prefetch=PREFETCH)
    async with topology(cfg.url, app) as conn:
        await prefill(conn, app.queue, [job(n) for n in range(cfg.n)])
        return await side(cfg, app)


async def baseline(cfg: Config) -> dict[str, float]:
    return await _measure(cfg, baseline_on)


async def candidate(cfg: Config) -> dict[str, float]:
    return await _measure(cfg, candidate_on)
