"""consume: N persistent ~200-byte typed messages, pre-published; a no-op async handler;
prefetch 256; messages per second from the first delivery to the last ack.

Baseline: the plainest correct aio-pika consumer: decode the JSON, ``ack()`` each one.
The peer baseline (:func:`pika_baseline`): the same with pika's ``BlockingConnection``,
the cheapest Python client per message (``pip install -e '.[bench]'``).
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


def _pika_consume(url: str, queue: str, n: int) -> dict[str, float]:
    """Consume ``n`` messages from ``queue`` with pika's BlockingConnection (blocking: run
    in a thread of its own while the event loop waits): decode the JSON, ack each."""
    import pika  # the bench extra: the peer baseline, not a rabbitq dependency

    conn = pika.BlockingConnection(pika.URLParameters(url))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=PREFETCH)
    state: dict[str, Any] = {"count": 0, "first": None, "last": None, "cpu": [0.0, 0.0]}

    def on_message(ch: Any, method: Any, _props: Any, body: bytes) -> None:
        if state["first"] is None:
            state["first"], state["cpu"][0] = clock(), time.process_time()
        loads(body)
        ch.basic_ack(method.delivery_tag)
        state["count"] += 1
        if state["count"] == n:
            state["last"], state["cpu"][1] = clock(), time.process_time()
            ch.stop_consuming()

    channel.basic_consume(queue, on_message)
    try:
        channel.start_consuming()
    finally:
        conn.close()
    return figures(n, state["first"], state["last"], state["cpu"])


async def pika_on(cfg: Config, app: App) -> dict[str, float]:
    """Consume ``cfg.n`` messages already in ``app.queue`` with plain pika (the peer
    baseline: the cheapest Python client per message)."""
    return await asyncio.to_thread(_pika_consume, cfg.url, app.queue, cfg.n)


async def pika_baseline(cfg: Config) -> dict[str, float]:
    return await _measure(cfg, pika_on)
