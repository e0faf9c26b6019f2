"""``python -m bench.pacer URL QUEUE N RATE``: publish N stamped messages to QUEUE at a
steady RATE per second (each one at its own scheduled time; catching up without
sleeping if behind), with confirms pipelined. The latency scenario's producer."""

from __future__ import annotations

import asyncio
import sys
import time

import aio_pika

from .common import BenchStamp, build

PAD = "p" * 120  # ~200 bytes with the other fields


async def pace(url: str, queue: str, n: int, rate: float) -> None:
    conn = await aio_pika.connect(url, client_properties={"connection_name": "rabbitq bench pacer"})
    channel = await conn.channel(publisher_confirms=True)
    exchange = channel.default_exchange
    pending: set[asyncio.Future[object]] = set()
    start = time.monotonic()
    for i in range(n):
        due = start + i / rate
        wait = due - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        message = build(BenchStamp(n=i, sent=time.monotonic(), pad=PAD))
        task = asyncio.ensure_future(exchange.publish(message, routing_key=queue))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.gather(*pending)
    await conn.close()


if __name__ == "__main__":
    url, queue, n, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    asyncio.run(pace(url, queue, n, rate))
