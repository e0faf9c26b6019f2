"""publish: ``publish()`` one at a time and ``publish_many()``, with confirms, to a topic
exchange bound to one queue.

Baselines: aio-pika publishing the same JSON with the same properties (persistent,
mandatory, type, message_id, timestamp) with confirms, one at a time, and pipelined
in windows of 512 (rabbitq's default window). The messages (models, or dicts for
the baseline) are built before the clock starts; encoding is inside it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import aio_pika
import orjson

from rabbitq._amqp.publisher import DEFAULT_WINDOW, Publisher

from .common import BenchJob, Config, bench_app, clock, job, topology, unique


def _app():
    app = bench_app(unique("publish"))

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:  # only binds bench.job to the queue
        pass

    return app


def _amqp(data: dict) -> aio_pika.Message:
    return aio_pika.Message(
        body=orjson.dumps(data),
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        type="bench.job",
        message_id=uuid.uuid4().hex,
        timestamp=datetime.now(UTC),
    )


async def _baseline(cfg: Config, window: int) -> dict[str, float]:
    app = _app()
    data = [job(n).model_dump(mode="json") for n in range(cfg.small)]
    async with topology(cfg.url, app) as conn:
        channel = await conn.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(app.exchange)
        started, cpu = clock(), time.process_time()
        if window == 1:
            for d in data:
                await exchange.publish(_amqp(d), routing_key="bench.job", mandatory=True)
        else:
            for i in range(0, len(data), window):
                await asyncio.gather(
                    *(
                        exchange.publish(_amqp(d), routing_key="bench.job", mandatory=True)
                        for d in data[i : i + window]
                    )
                )
        elapsed, cpu = clock() - started, time.process_time() - cpu
        await channel.close()
    return {"msg/s": len(data) / elapsed, "cpu us/msg": cpu / len(data) * 1e6}


async def baseline_sequential(cfg: Config) -> dict[str, float]:
    return await _baseline(cfg, 1)


async def baseline_pipelined(cfg: Config) -> dict[str, float]:
    return await _baseline(cfg, DEFAULT_WINDOW)


async def _candidate(cfg: Config, many: bool) -> dict[str, float]:
    app = _app()
    messages = [job(n) for n in range(cfg.small)]
    async with topology(cfg.url, app) as conn:
        async with Publisher(app, url=cfg.url, connection=conn) as pub:
            started, cpu = clock(), time.process_time()
            if many:
                await pub.publish_many(messages)
            else:
                for m in messages:
                    await pub.publish(m)
            elapsed, cpu = clock() - started, time.process_time() - cpu
    return {"msg/s": len(messages) / elapsed, "cpu us/msg": cpu / len(messages) * 1e6}


async def candidate_sequential(cfg: Config) -> dict[str, float]:
    return await _candidate(cfg, False)


async def candidate_many(cfg: Config) -> dict[str, float]:
    return await _candidate(cfg, True)
