"""delays: what ``publish(delay=...)`` costs against a plain ``publish()``, in one run
(``python -m bench.delays``, docs/benchmarks.md).

Both publish N typed messages with confirms to an app bound to one queue, one at a time
and then 512 at a time (``asyncio.gather``): plainly, and with a random delay in
[0, 2) s, which sends each message into the delay ladder (1 to 4 hops). The publisher is
opened before the clock starts, and its first delayed publish (which declares the
ladder) is made before it too: what is timed is the steady cost. Rounds alternate the
order of the modes; the table shows the median (min-max) msg/s and the ratio to the
plain publish. Every delayed message is waited for in the queue before the queue is
deleted, so none is left in the shared ladder.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time
from typing import Any

from rabbitq._amqp.publisher import DEFAULT_WINDOW, Publisher

from .common import (
    BenchJob,
    bench_app,
    clock,
    job,
    run_scenario,
    spread,
    topology,
    unique,
)

MAX_DELAY = 2.0
MODES = ("publish", "publish delay=", "publish x512", "publish delay= x512")


def _app():
    app = bench_app(unique("delays"))

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:  # only binds bench.job to the queue
        pass

    return app


async def _run(url: str, n: int, mode: str) -> tuple[float, float]:
    app = _app()
    delayed = "delay=" in mode
    window = DEFAULT_WINDOW if "x512" in mode else 1
    messages = [job(k) for k in range(n)]
    delays = [random.uniform(0, MAX_DELAY) if delayed else None for _ in range(n)]
    async with topology(url, app) as conn:
        async with Publisher(app, url=url, connection=conn) as pub:
            if delayed:  # declares the ladder: once per publisher, not timed
                await pub.publish(job(-1), delay=0)
            started, cpu = clock(), time.process_time()
            for i in range(0, n, window):
                await asyncio.gather(
                    *(
                        pub.publish(m, delay=d)
                        for m, d in zip(
                            messages[i : i + window], delays[i : i + window], strict=True
                        )
                    )
                )
            elapsed, cpu = clock() - started, time.process_time() - cpu
        # all of them in the queue before it is deleted: none left in the shared ladder
        await _arrived(conn, app.queue, n + delayed, timeout=MAX_DELAY + 120)
    return n / elapsed, cpu / n * 1e6


async def _arrived(conn: Any, queue: str, count: int, timeout: float) -> None:
    """Take ``count`` messages off ``queue``. Counted by consuming, not by a passive
    declare: on RabbitMQ 3.10.8 a quorum queue's declare-ok leaves out the messages that
    at-least-once dead-lettering brought in (measured: 0 reported, 50 there)."""
    channel = await conn.channel()
    await channel.set_qos(prefetch_count=1000)
    got = 0
    try:
        async with asyncio.timeout(timeout):
            async with (await channel.get_queue(queue)).iterator(no_ack=True) as messages:
                async for _ in messages:
                    got += 1
                    if got == count:
                        return
    finally:
        await channel.close()


async def main_async(url: str, n: int, rounds: int) -> None:
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpus: dict[str, list[float]] = {mode: [] for mode in MODES}
    for r in range(rounds):
        for pair in (MODES[:2], MODES[2:]):
            for mode in pair if r % 2 == 0 else reversed(pair):
                rate, cpu = await _run(url, n, mode)
                results[mode].append(rate)
                cpus[mode].append(cpu)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    print(f"\nn={n}, rounds={rounds}, delays uniform in [0, {MAX_DELAY:g}) s\n")
    print("| scenario | msg/s, median (min-max) | vs plain | client cpu us/msg | vs plain |")
    print("|---|---|---|---|---|")
    for plain, delayed in (MODES[:2], MODES[2:]):
        base, base_cpu = statistics.median(results[plain]), statistics.median(cpus[plain])
        for mode in (plain, delayed):
            ratio = statistics.median(results[mode]) / base
            cpu_ratio = statistics.median(cpus[mode]) / base_cpu
            print(
                f"| {mode} | {spread(results[mode])} | {ratio:.2f}x | "
                f"{statistics.median(cpus[mode]):.0f} | {cpu_ratio:.2f}x |"
            )


def main() -> None:
    run_scenario(__doc__, main_async, n=2000)


if __name__ == "__main__":
    main()
