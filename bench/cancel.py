"""cancel: what ``App(cancellable=True)`` costs on the consume path (``python -m
bench.cancel``, docs/benchmarks.md).

Consume N pre-published messages with a no-op async handler at prefetch 256 (as the
``consume`` scenario): a plain app, and the same app with the ``cancelled`` stage over
Redis and over PostgreSQL (the stage alone: no idempotency or status store, so the
ratio is the cancel check's own cost). Every delivery is looked up; the lookups of
one window (rabbitq/cancellation/lookups.py) go in one ``MGET`` / one
``SELECT ... = ANY``. A tenth of the messages were cancelled before the run (acked
unrun: counted, not handled). Rounds alternate the
order of the modes; the table shows the median (min-max) handled msg/s and the worker
process's CPU time per message settled, each with its ratio to the plain app's median
in the same run.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import uuid
from typing import Any

from rabbitq import App, RetryPolicy, Worker
from rabbitq.backends import PostgresBackend, RedisBackend
from rabbitq.cancellation.stage import cancel_stage
from rabbitq.job import add_stage

from .common import (
    PREFILL_WINDOW,
    BenchJob,
    SettleClock,
    build,
    job,
    run_scenario,
    spread,
    topology,
)
from .common import unique as unique_queue
from .status import PG, PREFETCH, REDIS

MODES = ("plain", "cancel redis", "cancel postgres")
CANCELLED_EVERY = 10  # one message in ten was cancelled before the run


async def _prefill(conn: Any, queue: str, messages: list[Any], ids: list[str]) -> None:
    """``messages`` straight to ``queue`` with the message ids ``ids`` (not measured)."""
    channel = await conn.channel(publisher_confirms=True)
    pairs = list(zip(messages, ids, strict=True))
    for start in range(0, len(pairs), PREFILL_WINDOW):
        await asyncio.gather(
            *(
                channel.default_exchange.publish(build(m, message_id=i), routing_key=queue)
                for m, i in pairs[start : start + PREFILL_WINDOW]
            )
        )
    await channel.close()


async def consume(url: str, n: int, mode: str) -> tuple[float, float]:
    """Handled msg/s, and the process's CPU us per message settled, in ``mode``."""
    queue = unique_queue("cancel")
    app = App(
        queue=queue, exchange=queue + ".x", prefetch=PREFETCH, retry=RetryPolicy(delays=(60,))
    )
    tag = uuid.uuid4().hex[:8]
    backend: Any = None
    if mode == "cancel redis":
        backend = RedisBackend(REDIS, key_prefix=f"bench:{tag}:")
    elif mode == "cancel postgres":
        backend = PostgresBackend(PG, prefix=f"bench_{tag}_", cleanup_interval=None)
    cancelled = 0
    messages = [job(i) for i in range(n)]
    ids = [f"bench-{tag}-{i}" for i in range(n)]
    if backend is not None:
        stage = cancel_stage(backend)
        app.delivery_stages = add_stage(app.delivery_stages, stage)
        doomed = ids[::CANCELLED_EVERY]
        await stage.store.add(doomed)
        cancelled = len(doomed)

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:
        pass

    try:
        async with topology(url, app) as conn:
            await _prefill(conn, app.queue, messages, ids)
            hooks = SettleClock(n - cancelled)  # the handled ones call the hook
            worker = Worker(app, url=url, hooks=hooks)
            task = asyncio.create_task(worker.run())
            try:
                await asyncio.wait_for(hooks.done.wait(), 600)
            finally:
                worker.stop()
                await task
        assert hooks.first is not None and hooks.last is not None
        cpu = (hooks.cpu[1] - hooks.cpu[0]) / n * 1e6
        return (n - cancelled) / (hooks.last - hooks.first), cpu
    finally:
        if isinstance(backend, PostgresBackend):
            from tests.effects.conftest import drop_tables

            await drop_tables(backend.location.prefix)
        elif isinstance(backend, RedisBackend):
            import redis.asyncio as aioredis

            client = aioredis.Redis.from_url(REDIS)
            async for name in client.scan_iter(match=f"bench:{tag}:*", count=1000):
                await client.delete(name)
            await client.aclose()


async def main_async(url: str, n: int, rounds: int) -> None:
    results: dict[str, list[float]] = {m: [] for m in MODES}
    cpus: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
            rate, cpu = await consume(url, n, mode)
            results[mode].append(rate)
            cpus[mode].append(cpu)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    base = statistics.median(results["plain"])
    print(f"\nn={n}, rounds={rounds}, prefetch {PREFETCH}, 1 in {CANCELLED_EVERY} cancelled\n")
    base_cpu = statistics.median(cpus["plain"])
    print("| scenario | handled msg/s, median (min-max) | vs plain | CPU us/msg | vs plain |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        ratio = statistics.median(results[mode]) / base
        cpu = statistics.median(cpus[mode])
        print(
            f"| consume, {mode} | {spread(results[mode])} | {ratio:.2f}x | {cpu:.0f} "
            f"| {cpu / base_cpu:.2f}x |"
        )


def main() -> None:
    run_scenario(__doc__, main_async, n=5000)


if __name__ == "__main__":
    main()
