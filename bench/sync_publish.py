"""sync_publish: publishing from synchronous code, 8 threads, in one run
(``python -m bench.sync_publish``, docs/benchmarks.md).

Three ways to publish N typed messages with confirms to an app bound to one queue:

- ``asyncio.run per publish`` (the baseline: what synchronous code did before
  ``app.sync_publisher()``): 8 threads, each ``asyncio.run`` of ``async with
  app.publisher() as pub: await pub.publish(msg)`` per message, so a connection (its
  handshake and the exchange declare) per publish;
- ``sync publisher``: the same 8 threads share one ``app.sync_publisher()``, each
  ``pub.publish(msg)`` blocking until confirmed (its connection opened by one publish
  before the clock starts, as in a long-running web process);
- ``async publish_many``: one coroutine, ``await pub.publish_many(msgs)`` (512 in flight:
  the upper bound, for code that is async and has all its messages at once).

Each mode publishes its N messages to a fresh queue, checks that exactly N arrived, and
deletes it. Rounds alternate the order of the modes; the table shows the median
(min-max) msg/s, the process's CPU time per message (every thread's) and the ratio of
each to the baseline.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time
from collections.abc import Callable

from .common import (
    BenchJob,
    bench_app,
    clock,
    job,
    run_scenario,
    spread,
    topology,
    unique,
    wait_depth,
)

THREADS = 8
MODES = ("asyncio.run per publish", "sync publisher", "async publish_many")


def _app():
    app = bench_app(unique("sync"))

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:  # only binds bench.job to the queue
        pass

    return app


def _in_threads(count: int, work: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            work(k)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _per_publish(app, messages: list[BenchJob]) -> float:
    """8 threads, a new event loop and connection per publish; returns the seconds."""

    async def one(message: BenchJob) -> None:
        async with app.publisher() as pub:
            await pub.publish(message)

    def work(k: int) -> None:
        for message in messages[k::THREADS]:
            asyncio.run(one(message))

    started = clock()
    _in_threads(THREADS, work)
    return clock() - started


def _shared(app, messages: list[BenchJob]) -> float:
    """8 threads sharing one sync publisher; returns the seconds."""
    with app.sync_publisher() as pub:
        pub.publish(job(-1))  # connected before the clock starts (counted in the queue)

        def work(k: int) -> None:
            for message in messages[k::THREADS]:
                pub.publish(message)

        started = clock()
        _in_threads(THREADS, work)
        return clock() - started


async def _many(app, messages: list[BenchJob]) -> float:
    async with app.publisher() as pub:
        started = clock()
        await pub.publish_many(messages)
        return clock() - started


async def _run(url: str, n: int, mode: str) -> tuple[float, float]:
    app = _app()
    app.url = url
    messages = [job(k) for k in range(n)]
    async with topology(url, app) as conn:
        cpu = time.process_time()
        if mode == MODES[0]:
            elapsed = await asyncio.to_thread(_per_publish, app, messages)
        elif mode == MODES[1]:
            elapsed = await asyncio.to_thread(_shared, app, messages)
        else:
            elapsed = await _many(app, messages)
        cpu = time.process_time() - cpu  # every thread's, the shared one's opening too
        # Exactly the messages published (and the sync publisher's one before the clock).
        await wait_depth(conn, app.queue, n + (mode == MODES[1]), timeout=60)
    return n / elapsed, cpu / n * 1e6


async def main_async(url: str, n: int, rounds: int) -> None:
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpus: dict[str, list[float]] = {mode: [] for mode in MODES}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else reversed(MODES):
            rate, cpu = await _run(url, n, mode)
            rates[mode].append(rate)
            cpus[mode].append(cpu)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    base, base_cpu = statistics.median(rates[MODES[0]]), statistics.median(cpus[MODES[0]])
    print(f"\nn={n}, {THREADS} threads (publish_many: one coroutine), rounds={rounds}\n")
    print("| mode | msg/s, median (min-max) | vs asyncio.run | cpu us/msg | vs asyncio.run |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        ratio = statistics.median(rates[mode]) / base
        cpu = statistics.median(cpus[mode])
        print(
            f"| {mode} | {spread(rates[mode])} | {ratio:.2f}x | {cpu:.0f} | {cpu / base_cpu:.2f}x |"
        )
    shared, many = statistics.median(rates[MODES[1]]), statistics.median(rates[MODES[2]])
    print(f"\nsync publisher / async publish_many: {shared / many:.2f}x")


def main() -> None:
    run_scenario(__doc__, main_async, n=2000)


if __name__ == "__main__":
    main()
