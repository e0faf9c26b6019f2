"""Profile the consume path alone, without the pre-publishing in the picture::

    python -m bench.profile fill Q 20000            # declare Q and pre-publish (not profiled)
    py-spy record -r 250 -f raw -o prof.txt -- python -m bench.profile consume rabbitq Q 20000
    python -m bench.profile top prof.txt            # where the time goes
    python -m bench.profile clean Q                 # delete Q and its exchange

``consume`` takes ``baseline`` (aio-pika), ``pika``, ``aiormq`` (the floor under rabbitq:
aiormq's channel, a no-op callback, one multiple-ack per 64), ``rabbitq``,
``rabbitq-ack-each`` (acks not coalesced) or ``rabbitq-uvloop`` and prints the rate it
reached and the client's CPU per message.
``top`` reads py-spy's raw (collapsed) output and prints the functions with the most
samples, by self time and by inclusive time, as percentages of all samples.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from typing import Any

import rabbitq._ops.loop

from . import consume
from .common import (
    DEFAULT_URL,
    Config,
    bench_app,
    check_local,
    clock,
    connection,
    delete,
    job,
    loads,
    prefill,
)

# The rabbitq variants ``consume`` can run, by name: the Worker's options.
SIDES: dict[str, dict[str, object]] = {
    "rabbitq": {},
    "rabbitq-ack-each": {"coalesce_acks": False},
    "rabbitq-uvloop": {},  # the same, on uvloop
}


def _cfg(n: int) -> Config:
    return Config(url=check_local(DEFAULT_URL), n=n, rounds=1, quick=False)


async def fill(queue: str, n: int) -> None:
    from rabbitq._amqp.topology import declare

    app = bench_app(queue, prefetch=consume.PREFETCH)
    async with connection(DEFAULT_URL, "rabbitq bench profile") as conn:
        channel = await conn.channel()
        await declare(channel, app.topology())
        await prefill(conn, queue, [job(i) for i in range(n)])


async def clean(queue: str) -> None:
    async with connection(DEFAULT_URL, "rabbitq bench profile") as conn:
        await delete(await conn.channel(), bench_app(queue))


async def run(side: str, queue: str, n: int) -> None:
    app = bench_app(queue, prefetch=consume.PREFETCH)
    if side == "baseline":
        figures = await consume.baseline_on(_cfg(n), app)
    elif side == "pika":
        figures = await consume.pika_on(_cfg(n), app)
    elif side == "aiormq":
        figures = await aiormq_floor(queue, n)
    else:
        figures = await consume.candidate_on(_cfg(n), app, **SIDES[side])
    print(f"{side}: {figures['msg/s']:.0f} msg/s, {figures['cpu us/msg']:.0f} us CPU/msg")


async def aiormq_floor(queue: str, n: int) -> dict[str, float]:
    """Consume ``n`` messages on aiormq's channel as rabbitq does, doing nothing but
    decode the JSON and ack every 64th delivery with ``multiple``: what rabbitq's
    transport costs before any of its own work."""
    done = asyncio.Event()
    first: float | None = None
    last: float | None = None
    cpu = [0.0, 0.0]
    count = 0
    async with connection(DEFAULT_URL, "rabbitq bench profile") as conn:
        robust = await conn.channel()
        await robust.set_qos(prefetch_count=consume.PREFETCH)
        channel = await robust.get_underlay_channel()

        async def on_message(message: Any) -> None:
            nonlocal first, last, count
            if first is None:
                first, cpu[0] = clock(), time.process_time()
            loads(message.body)
            count += 1
            if count % 64 == 0 or count == n:
                await channel.basic_ack(message.delivery.delivery_tag, multiple=True)
            if count == n:
                last, cpu[1] = clock(), time.process_time()
                done.set()

        await channel.basic_consume(queue, on_message)
        await asyncio.wait_for(done.wait(), 300)
    return consume.figures(n, first, last, cpu)


def top(path: str, limit: int = 25) -> None:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            samples = int(count)
            frames = [
                fr.split(" (")[0] + " " + fr.rsplit("/", 1)[-1].rstrip(")")
                for fr in stack.split(";")
            ]
            total += samples
            own[frames[-1]] += samples
            for frame in set(frames):
                inclusive[frame] += samples
    for title, counter in (("self", own), ("inclusive", inclusive)):
        print(f"-- {title} ({total} samples)")
        for name, samples in counter.most_common(limit):
            print(f"{100 * samples / total:5.1f}%  {name}")


def main() -> None:
    cmd, *args = sys.argv[1:]
    if cmd == "fill":
        asyncio.run(fill(args[0], int(args[1])))
    elif cmd == "clean":
        asyncio.run(clean(args[0]))
    elif cmd == "consume":
        loop = "uvloop" if args[0].endswith("-uvloop") else "asyncio"
        rabbitq._ops.loop.run(run(args[0], args[1], int(args[2])), loop=loop)
    elif cmd == "top":
        top(args[0], int(args[1]) if len(args) > 1 else 25)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
