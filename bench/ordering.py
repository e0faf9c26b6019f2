"""ordering: what ordered handlers cost (``python -m bench.ordering``, docs/ordering.md).

Consume N pre-published messages whose handler awaits 1 ms (an I/O call), at prefetch
64, in four modes of the same run:

- ``unordered``: a plain handler (the baseline);
- ``ordered, 1000 keys``: ``ordered_by`` over 1000 keys (most deliveries in flight have
  keys of their own: the cost is the bookkeeping and the decode of the key);
- ``ordered, 8 keys``: ``ordered_by`` over 8 keys (at most 8 handlers run at once,
  however large the prefetch: what one-at-a-time per key means for hot keys);
- ``ordered, 4 partitions, 1000 keys``: ``App(partitions=4)`` in one process (four
  queues, four connections; published through the consistent-hash exchange).

Rounds alternate the order of the modes; the table shows the median (min-max) msg/s
and the ratio to the unordered median of the same run. The partitioned mode needs the
broker's consistent-hash exchange plugin.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys

from rabbitq import App, RetryPolicy
from rabbitq._ops.run import WorkerSpec, worker_for

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

PREFETCH = 64
WORK = 0.001
MODES = ("unordered", "ordered, 1000 keys", "ordered, 8 keys", "ordered, 4 partitions, 1000 keys")


def _app(mode: str) -> App:
    queue = unique_queue("ordering")
    partitions = 4 if "partitions" in mode else 0
    app = App(
        queue=queue,
        exchange=queue + ".x",
        prefetch=PREFETCH,
        retry=RetryPolicy(delays=(1,)),
        partitions=partitions,
    )
    keys = 8 if "8 keys" in mode else 1000
    ordered = {} if mode == "unordered" else {"ordered_by": lambda m: m.n % keys}

    @app.handler(BenchJob, **ordered)  # type: ignore[arg-type]
    async def handle(msg: BenchJob) -> None:
        await asyncio.sleep(WORK)

    return app


async def consume(url: str, n: int, mode: str) -> float:
    """msg/s consuming ``n`` messages in ``mode``."""
    app = _app(mode)
    async with topology(url, app) as conn:
        try:
            if app.partitions:
                async with app.publisher(url=url) as pub:
                    await pub.publish_many([job(i) for i in range(n)])
            else:
                await prefill(conn, app.queue, [job(i) for i in range(n)])
            hooks = SettleClock(n)
            worker = worker_for(app, WorkerSpec(app_spec="-", url=url), hooks=hooks)
            task = asyncio.create_task(worker.run())
            try:
                await asyncio.wait_for(hooks.done.wait(), 600)
            finally:
                worker.stop()
                await task
        finally:
            await _delete_partitions(conn, app)
    assert hooks.first is not None and hooks.last is not None
    return n / (hooks.last - hooks.first)


async def _delete_partitions(conn: object, app: App) -> None:
    partitioning = app.topology().partitioning
    if partitioning is None:
        return
    channel = await conn.channel()  # type: ignore[attr-defined]
    for spec in partitioning.queues:
        with contextlib.suppress(Exception):
            await channel.queue_delete(spec.name)
    with contextlib.suppress(Exception):
        await channel.exchange_delete(partitioning.exchange)
    with contextlib.suppress(Exception):
        await channel.close()


async def main_async(url: str, n: int, rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
            results[mode].append(await consume(url, n, mode))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    base = statistics.median(results["unordered"])
    print(f"\nn={n}, rounds={rounds}, prefetch {PREFETCH}, handler awaits {WORK * 1000:g} ms\n")
    print("| mode | msg/s, median (min-max) | vs unordered |")
    print("|---|---|---|")
    for mode in MODES:
        ratio = statistics.median(results[mode]) / base
        print(f"| {mode} | {spread(results[mode])} | {ratio:.2f}x |")
    return results


def main() -> None:
    run_scenario(__doc__, main_async, n=5000)


if __name__ == "__main__":
    main()
