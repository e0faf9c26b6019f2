"""latency: p50/p95/p99 from publish to handler start at a steady 1 000 msg/s.

A separate process (:mod:`bench.pacer`) publishes messages stamped with the monotonic
clock (system-wide on Linux) at a steady rate; the consumer records when each one
reaches its handler. Baseline: a raw aio-pika consumer doing the same.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from aio_pika.abc import AbstractIncomingMessage

from rabbitq import Worker

from .common import BenchStamp, Config, bench_app, loads, topology, unique

RATE = 1000
PREFETCH = 256


def _count(cfg: Config) -> int:
    return max(100, min(cfg.small, 5 * RATE))


def percentiles(latencies: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles([x * 1000 for x in latencies], n=100, method="inclusive")
    return {"p50 ms": cuts[49], "p95 ms": cuts[94], "p99 ms": cuts[98]}


async def _pace(cfg: Config, queue: str, n: int) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.pacer", cfg.url, queue, str(n), str(RATE)
    )
    if await proc.wait() != 0:
        raise RuntimeError(f"the pacer exited with {proc.returncode}")


async def baseline(cfg: Config) -> dict[str, float]:
    app = bench_app(unique("latency"))
    n = _count(cfg)
    latencies: list[float] = []
    done = asyncio.Event()
    async with topology(cfg.url, app) as conn:
        channel = await conn.channel()
        await channel.set_qos(prefetch_count=PREFETCH)
        queue = await channel.get_queue(app.queue)

        async def on_message(message: AbstractIncomingMessage) -> None:
            data = loads(message.body)
            latencies.append(time.monotonic() - data["sent"])
            await message.ack()
            if len(latencies) == n:
                done.set()

        tag = await queue.consume(on_message)
        await _pace(cfg, app.queue, n)
        await asyncio.wait_for(done.wait(), 120)
        await queue.cancel(tag)
        await channel.close()
    return percentiles(latencies)


async def candidate(cfg: Config) -> dict[str, float]:
    app = bench_app(unique("latency"))
    n = _count(cfg)
    latencies: list[float] = []
    done = asyncio.Event()

    @app.handler(BenchStamp)
    async def handle(msg: BenchStamp) -> None:
        latencies.append(time.monotonic() - msg.sent)
        if len(latencies) == n:
            done.set()

    async with topology(cfg.url, app):
        worker = Worker(app, url=cfg.url)
        task = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(worker.ready.wait(), 30)
            await _pace(cfg, app.queue, n)
            await asyncio.wait_for(done.wait(), 120)
        finally:
            worker.stop()
            await task
    return percentiles(latencies)
