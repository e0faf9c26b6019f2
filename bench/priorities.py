"""priorities: what ``App(priorities=3)`` costs on the consume path (``python -m
bench.priorities``, docs/control.md, "Priorities").

Consume N pre-published messages with a no-op async handler, at prefetch 64, in three
modes of the same run:

- ``plain``: ``App()`` and its ``Worker`` (the baseline);
- ``priorities=3, all at 0``: the same messages, all in lane 0, consumed by a
  ``PriorityWorker`` (three lane workers, the weighted gate on every delivery);
- ``priorities=3, spread``: a third of the messages in each lane.

Rounds alternate the order of the modes; the table shows the median (min-max) msg/s
and the ratio to the plain median of the same run.
"""

from __future__ import annotations

import asyncio
import statistics
import sys

from rabbitq import App, RetryPolicy
from rabbitq._amqp.lanes import lane_queue
from rabbitq._ops.run import WorkerSpec, worker_for

from .common import BenchJob, SettleClock, job, prefill, run_scenario, spread, topology
from .common import unique as unique_queue

PREFETCH = 64
MODES = ("plain", "priorities=3, all at 0", "priorities=3, spread")


def _app(mode: str) -> App:
    queue = unique_queue("priorities")
    app = App(
        queue=queue,
        exchange=queue + ".x",
        prefetch=PREFETCH,
        retry=RetryPolicy(delays=(1,)),
        priorities=0 if mode == "plain" else 3,
    )

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:
        pass

    return app


async def consume(url: str, n: int, mode: str) -> float:
    """msg/s consuming ``n`` messages in ``mode``."""
    app = _app(mode)
    async with topology(url, app) as conn:
        lanes = 3 if mode.endswith("spread") else 1
        for level in range(lanes):
            share = [job(i) for i in range(level, n, lanes)]
            await prefill(conn, lane_queue(app.queue, level), share)
        hooks = SettleClock(n)
        worker = worker_for(app, WorkerSpec(app_spec="-", url=url), hooks=hooks)
        task = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(hooks.done.wait(), 600)
        finally:
            worker.stop()
            await task
    assert hooks.first is not None and hooks.last is not None
    return n / (hooks.last - hooks.first)


async def main_async(url: str, n: int, rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
            results[mode].append(await consume(url, n, mode))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    base = statistics.median(results["plain"])
    print(f"\nn={n}, rounds={rounds}, prefetch {PREFETCH}, a no-op handler\n")
    print("| mode | msg/s, median (min-max) | vs plain |")
    print("|---|---|---|")
    for mode in MODES:
        ratio = statistics.median(results[mode]) / base
        print(f"| {mode} | {spread(results[mode])} | {ratio:.2f}x |")
    return results


def main() -> None:
    run_scenario(__doc__, main_async, n=5000)


if __name__ == "__main__":
    main()
