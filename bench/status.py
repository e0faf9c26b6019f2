"""status: what recording every message's status costs (``python -m bench.status``,
docs/benchmarks.md).

Consume N pre-published messages with a no-op async handler at prefetch 256 (as the
``consume`` scenario), without a status store, with ``App(status=RedisStatus(...))`` and
with ``App(status=PostgresStatus(...))``: three records per message (received, started,
succeeded), written in batches by the writer's task while the worker runs. Rounds
alternate the order of the modes; the table shows the median (min-max) msg/s, the
ratio to the no-store median, and the records written and lost over all rounds (the
writer's own counts, after the worker's final flush). PostgreSQL and Redis are the
local ones (``$RABBITQ_TEST_PG``, ``$RABBITQ_TEST_REDIS``); every table and key prefix
is unique and dropped.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import uuid
from typing import Any

from rabbitq import App, RetryPolicy, Worker
from rabbitq.status import PostgresStatus, RedisStatus

from .common import (
    BenchJob,
    SettleClock,
    job,
    prefill,
    run_scenario,
    spread,
    topology,
)
from .common import unique as unique_queue

PG = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("RABBITQ_TEST_REDIS", "redis://127.0.0.1:6379/0")
PREFETCH = 256
MODES = ("no store", "redis", "postgres")


async def consume(url: str, n: int, mode: str) -> tuple[float, float, dict[str, int]]:
    """msg/s and CPU us/msg consuming ``n`` messages in ``mode``, and the writer's counts."""
    prefix = f"bench_{uuid.uuid4().hex[:8]}_"
    store: Any = None
    if mode == "redis":
        store = RedisStatus(REDIS, key_prefix=prefix.replace("_", ":"))
    elif mode == "postgres":
        store = PostgresStatus(PG, prefix=prefix, cleanup_interval=None)
    queue = unique_queue("status")
    app = App(
        queue=queue,
        exchange=queue + ".x",
        prefetch=PREFETCH,
        retry=RetryPolicy(delays=(60,)),
        status=store,
    )

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:
        pass

    try:
        async with topology(url, app) as conn:
            await prefill(conn, app.queue, [job(i) for i in range(n)])
            hooks = SettleClock(n)
            worker = Worker(app, url=url, hooks=hooks)
            task = asyncio.create_task(worker.run())
            try:
                await asyncio.wait_for(hooks.done.wait(), 600)
            finally:
                worker.stop()
                await task  # its shutdown flushes the status records
        assert hooks.first is not None and hooks.last is not None
        counts = dict(app.status_writer.counts) if app.status_writer else {}
        cpu = (hooks.cpu[1] - hooks.cpu[0]) / n * 1e6
        return n / (hooks.last - hooks.first), cpu, counts
    finally:
        if isinstance(store, RedisStatus):
            await store.drop()
            await store.close()
        elif isinstance(store, PostgresStatus):
            await store.drop()


async def main_async(url: str, n: int, rounds: int) -> None:
    results: dict[str, list[float]] = {m: [] for m in MODES}
    cpus: dict[str, list[float]] = {m: [] for m in MODES}
    counts: dict[str, dict[str, int]] = {m: {} for m in MODES}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
            rate, cpu, c = await consume(url, n, mode)
            results[mode].append(rate)
            cpus[mode].append(cpu)
            for k, v in c.items():
                counts[mode][k] = counts[mode].get(k, 0) + v
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    base = statistics.median(results["no store"])
    print(f"\nn={n}, rounds={rounds}, prefetch {PREFETCH}\n")
    base_cpu = statistics.median(cpus["no store"])
    print(
        "| scenario | msg/s, median (min-max) | vs no store | CPU us/msg | vs no store "
        "| records written / lost |"
    )
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        ratio = statistics.median(results[mode]) / base
        c = counts[mode]
        written = f"{c['written']:,} / {c['failed'] + c['dropped']:,}" if c else "-"
        cpu = statistics.median(cpus[mode])
        print(
            f"| consume, status {mode} | {spread(results[mode])} | {ratio:.2f}x | {cpu:.0f} "
            f"| {cpu / base_cpu:.2f}x | {written} |"
        )


def main() -> None:
    run_scenario(__doc__, main_async, n=5000)


if __name__ == "__main__":
    main()
