"""retry path: every message fails once into a 1 s tier and succeeds when it comes back.

``msg/s``: messages per second through failure -> retry copy confirmed -> ack, from the
first delivery to the N-th original acked after its copy was confirmed.
``cycle msg/s``: from the first delivery until every message has come back and
succeeded (so it includes the 1 s tier's wait).

Baseline: a raw aio-pika move loop on the same queues: publish the copy (same body and
properties, an attempt header) to the retry queue with a confirm, then ack.
"""

from __future__ import annotations

import asyncio
import time

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from rabbitq import App, Context, Worker
from rabbitq.hooks import Hooks

from .common import BenchJob, Config, bench_app, clock, job, loads, prefill, rate, topology, unique

PREFETCH = 256
DELAY = 1.0


def _app() -> App:
    """The app of both sides, with the handler that fails once: an app declares only
    the retry queues its handlers use, so without it there would be no 1 s tier for the
    baseline to copy into."""
    app = bench_app(unique("retry"), prefetch=PREFETCH, delays=(DELAY,))

    @app.handler(BenchJob)
    async def handle(msg: BenchJob, ctx: Context) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("fails once")

    return app


class _Clock(Hooks):
    def __init__(self, n: int) -> None:
        self.n = n
        self.first: float | None = None
        self.retried_at: float | None = None
        self.done_at: float | None = None
        self.retries = 0
        self.cpu = [0.0, 0.0]
        self.successes = 0
        self.done = asyncio.Event()

    def received(self, queue: str, type_name: str) -> None:
        if self.first is None:
            self.first = clock()
            self.cpu[0] = time.process_time()

    def retried(self, queue: str, type_name: str, delay: str, duration: float) -> None:
        self.retries += 1
        if self.retries == self.n:
            self.retried_at = clock()
            self.cpu[1] = time.process_time()

    def succeeded(self, queue: str, type_name: str, duration: float) -> None:
        self.successes += 1
        if self.successes == self.n:
            self.done_at = clock()
            self.done.set()

    def figures(self) -> dict[str, float]:
        return {
            "msg/s": rate(self.n, self.first, self.retried_at),
            "cycle msg/s": rate(self.n, self.first, self.done_at),
            "cpu us/msg": (self.cpu[1] - self.cpu[0]) / self.n * 1e6,
        }


async def baseline(cfg: Config) -> dict[str, float]:
    app = _app()
    n = cfg.small
    retry_queue = app.topology().retries[0].name
    clk = _Clock(n)
    async with topology(cfg.url, app) as conn:
        await prefill(conn, app.queue, [job(i) for i in range(n)])
        channel = await conn.channel()
        await channel.set_qos(prefetch_count=PREFETCH)
        copies = await conn.channel(publisher_confirms=True)
        queue = await channel.get_queue(app.queue)

        async def on_message(message: AbstractIncomingMessage) -> None:
            clk.received(app.queue, "")
            loads(message.body)
            attempt = message.headers.get("rabbitq-attempt", 1)
            if attempt == 1:
                copy = aio_pika.Message(
                    body=message.body,
                    headers={**message.headers, "rabbitq-attempt": 2, "rabbitq-error": "E: x"},
                    content_type=message.content_type,
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    message_id=message.message_id,
                    timestamp=message.timestamp,
                    type=message.type,
                )
                await copies.default_exchange.publish(copy, retry_queue, mandatory=True)
                await message.ack()
                clk.retried(app.queue, "", "", 0)
            else:
                await message.ack()
                clk.succeeded(app.queue, "", 0)

        tag = await queue.consume(on_message)
        await asyncio.wait_for(clk.done.wait(), 300)
        await queue.cancel(tag)
        await channel.close()
        await copies.close()
    return clk.figures()


async def candidate(cfg: Config) -> dict[str, float]:
    app = _app()
    n = cfg.small
    clk = _Clock(n)
    async with topology(cfg.url, app) as conn:
        await prefill(conn, app.queue, [job(i) for i in range(n)])
        worker = Worker(app, url=cfg.url, hooks=clk)
        task = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(clk.done.wait(), 300)
        finally:
            worker.stop()
            await task
    return clk.figures()
