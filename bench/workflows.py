"""workflows: what a chord costs (``python -m bench.workflows``, docs/benchmarks.md).

In the same run, with the same app (prefetch 256, a RedisStore as idempotency and
status store, a no-op async handler that returns a small result):

- **plain**: ``chords * members`` messages published with ``publish_many``, handled;
- **chord**: ``chords`` chords of ``members`` messages each (each published with
  ``pub.publish(chord(...))``), handled, each callback published once and handled.

Each is timed from the first publish to the last success (the callbacks' included), by
the worker's own hooks, with the process's CPU time (the publisher's and the worker's,
in one process). Rounds alternate the order; the table gives the medians and the ratio
to plain. Redis is the local one (``$RABBITQ_TEST_REDIS``); every key prefix is unique
and deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid

import redis.asyncio as aioredis

from rabbitq import App, Context, Hooks, Message, RetryPolicy, Worker, chord
from rabbitq.effects import RedisStore

from .common import DEFAULT_URL, check_local, spread, topology
from .common import unique as unique_queue

REDIS = os.environ.get("RABBITQ_TEST_REDIS", "redis://127.0.0.1:6379/0")
MODES = ("plain", "chord")


class Line(Message, type="bench.wf.line"):
    n: int


class Total(Message, type="bench.wf.total"):
    chord: int


class Clock(Hooks):
    """The ``n``-th success, with the process's CPU time."""

    def __init__(self, n: int) -> None:
        self.n, self.count = n, 0
        self.done = asyncio.Event()
        self.last = 0.0
        self.cpu = 0.0

    def succeeded(self, queue: str, type_name: str, duration: float) -> None:
        self.count += 1
        if self.count == self.n:
            self.last, self.cpu = time.perf_counter(), time.process_time()
            self.done.set()


async def run(url: str, mode: str, chords: int, members: int) -> tuple[float, float]:
    """Messages (members) per second for ``mode``, and CPU us per member."""
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    store = RedisStore(REDIS, key_prefix=prefix + "idem:")
    queue = unique_queue("workflows")
    app = App(
        queue=queue,
        exchange=queue + ".x",
        prefetch=256,
        retry=RetryPolicy(delays=(60,)),
        idempotency=store,
        status=store,
    )

    @app.handler(Line)
    async def line(msg: Line) -> dict[str, int]:
        return {"n": msg.n}

    @app.handler(Total)
    async def total(msg: Total, ctx: Context) -> None:
        assert len(await ctx.chord_results()) == members

    n = chords * members
    clock = Clock(n + (chords if mode == "chord" else 0))
    try:
        async with topology(url, app):
            worker = Worker(app, url=url, hooks=clock)
            task = asyncio.create_task(worker.run())
            await asyncio.wait_for(worker.ready.wait(), 30)
            started, cpu = time.perf_counter(), time.process_time()
            async with app.publisher(url=url) as pub:
                if mode == "plain":
                    await pub.publish_many([Line(n=i) for i in range(n)])
                else:
                    made = [
                        chord([Line(n=i) for i in range(members)], then=Total(chord=c))
                        for c in range(chords)
                    ]
                    await asyncio.gather(*(pub.publish(c) for c in made))
            try:
                await asyncio.wait_for(clock.done.wait(), 600)
            finally:
                worker.stop()
                await task
        return n / (clock.last - started), (clock.cpu - cpu) / n * 1e6
    finally:
        await store.close()
        client = aioredis.Redis.from_url(REDIS)
        async for key in client.scan_iter(match=prefix + "*", count=1000):
            await client.delete(key)
        await client.aclose()


async def main_async(url: str, chords: int, members: int, rounds: int) -> None:
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
            rate, us = await run(url, mode, chords, members)
            rates[mode].append(rate)
            cpu[mode].append(us)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    base, base_cpu = statistics.median(rates["plain"]), statistics.median(cpu["plain"])
    print(f"\n{chords} chords x {members} members, rounds={rounds}, prefetch 256, Redis\n")
    print("| scenario | members/s, median (min-max) | vs plain | CPU us/member | vs plain |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        rate, us = statistics.median(rates[mode]), statistics.median(cpu[mode])
        print(
            f"| {mode} | {spread(rates[mode])} | {rate / base:.2f}x | {us:.0f} |"
            f" {us / base_cpu:.2f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chords", type=int, default=5)
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default=os.environ.get("RABBITQ_URL", DEFAULT_URL))
    args = parser.parse_args()
    started = time.time()
    asyncio.run(main_async(check_local(args.url), args.chords, args.members, args.rounds))
    print(f"\n({time.time() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
