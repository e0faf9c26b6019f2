"""Replay benchmark: rabbitq.dlq.replay against a raw aio-pika move loop.

Both move ``n`` dead messages from a DLQ back to their queue. The baseline is the
plain, safe loop a person would write with aio-pika: get one message, publish its
copy and wait for the confirm, ack, repeat. The candidate is ``rabbitq.dlq.replay``,
which pipelines the confirms. Each function declares its own queues and fills the DLQ
(not timed), times only the move, deletes its queues and returns messages per second.

    python bench/replay.py [N] [--url URL]     # 3 rounds, interleaved; prints medians
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import aio_pika

from rabbitq import dlq
from rabbitq._amqp import headers as h
from rabbitq._amqp.copy import replay_headers
from rabbitq.dlq.message import resolve_dlq

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
_FILL_WINDOW = 500


async def _setup(url: str, n: int) -> tuple[aio_pika.abc.AbstractConnection, str]:
    """A fresh queue and its DLQ holding ``n`` dead messages (about 200 bytes each)."""
    queue = f"bench.replay.{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(url)
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True)
    await channel.declare_queue(resolve_dlq(queue), durable=True)
    pending = []
    for i in range(n):
        headers = h.dead_letter_headers(
            {},
            reason="exhausted",
            error=f"TimeoutError: smtp.example.com timed out ({i})",
            traceback="Traceback (most recent call last): ...",
            queue=queue,
            attempt=5,
            exchange="rabbitq",
            routing_key="email.send",
        )
        message = aio_pika.Message(
            b'{"to": "user%d@example.com", "subject": "hi", "body": "..."}' % i,
            headers=headers,
            message_id=uuid.uuid4().hex,
            type="email.send",
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        pending.append(
            channel.default_exchange.publish(message, routing_key=resolve_dlq(queue))
        )
        if len(pending) >= _FILL_WINDOW:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    await channel.close()
    return connection, queue


async def _cleanup(connection: aio_pika.abc.AbstractConnection, queue: str, n: int) -> None:
    channel = await connection.channel()
    moved = await channel.declare_queue(queue, passive=True)
    count = moved.declaration_result.message_count
    await channel.queue_delete(queue)
    await channel.queue_delete(resolve_dlq(queue))
    await connection.close()
    if count != n:
        raise AssertionError(f"{queue}: {count} of {n} messages moved")


async def baseline(url: str, n: int) -> float:
    """Raw aio-pika, one message at a time: get, publish the copy with confirm, ack."""
    connection, queue = await _setup(url, n)
    channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
    source = await channel.declare_queue(resolve_dlq(queue), passive=True)
    start = time.perf_counter()
    moved = 0
    while (message := await source.get(no_ack=False, fail=False)) is not None:
        copy = aio_pika.Message(
            message.body,
            headers=replay_headers(message.headers),
            message_id=message.message_id,
            type=message.type,
            content_type=message.content_type,
            timestamp=message.timestamp,
            delivery_mode=message.delivery_mode,
        )
        await channel.default_exchange.publish(copy, routing_key=queue, mandatory=True)
        await message.ack()
        moved += 1
    elapsed = time.perf_counter() - start
    await channel.close()
    await _cleanup(connection, queue, n)
    return moved / elapsed


async def candidate(url: str, n: int) -> float:
    """``rabbitq.dlq.replay``: pipelined confirms, ack as each confirm arrives."""
    connection, queue = await _setup(url, n)
    start = time.perf_counter()
    tally = await dlq.replay(queue, url=url)
    elapsed = time.perf_counter() - start
    await _cleanup(connection, queue, n)
    return tally.done / elapsed


async def _main(url: str, n: int, rounds: int) -> None:
    results: dict[str, list[float]] = {"baseline": [], "candidate": []}
    for round_ in range(1, rounds + 1):
        for name, fn in (("baseline", baseline), ("candidate", candidate)):
            rate = await fn(url, n)
            results[name].append(rate)
            print(f"round {round_}: {name:9s} {rate:8.0f} msg/s")
    base = statistics.median(results["baseline"])
    cand = statistics.median(results["candidate"])
    print(f"median over {rounds} rounds, {n} messages each:")
    print(f"  baseline  (aio-pika get/publish+confirm/ack) {base:8.0f} msg/s")
    print(f"  candidate (rabbitq.dlq.replay)               {cand:8.0f} msg/s  ({cand / base:.1f}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=5000, help="messages per run")
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(_main(args.url, args.n, args.rounds))
