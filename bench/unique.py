"""unique: what ``publish(unique_for=...)`` and ``publish(debounce=...)`` cost against a
plain ``publish()``, in one run (``python -m bench.unique``, docs/benchmarks.md).

Each mode publishes N typed messages with confirms, one at a time, to an app bound to
one queue: plainly (an app without a store); plainly on an app with a store (the
``unique`` step is there and passes the message on); with ``delay=0.1`` (the ladder
hop a debounced message takes, without the store); with ``unique_for=3600`` and a key
of its own per message (the key taken, then held for the window: two round trips to
the store), and with ``debounce=0.1`` and a key per 10 messages (the key's pending and
latest written: two round trips, and the ladder) on Redis and on PostgreSQL (the
machine's, loopback). The publisher is open, its store connected and the ladder
declared before the clock starts. Rounds alternate the order of the modes; the table
shows the median (min-max) msg/s and the client's CPU per message (steadier on a busy
machine), each with its ratio to the plain publish. Every delayed
message is taken off the queue before it is deleted (none left in the shared ladder),
and the bench's keys and tables are deleted after.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid

from rabbitq import App, RetryPolicy
from rabbitq.backends import Backend, PostgresBackend, RedisBackend

from .common import BenchJob, clock, job, run_scenario, spread, topology, unique
from .delays import _arrived  # taken off by consuming: see there

PG_URL = os.environ.get("RABBITQ_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("RABBITQ_BENCH_REDIS", "redis://127.0.0.1:6379/0")
MODES = (
    "publish",
    "publish, app with a store",
    "publish delay=0.1",
    "unique_for= (redis)",
    "debounce= (redis)",
    "unique_for= (postgres)",
    "debounce= (postgres)",
)


def _backend(mode: str, tag: str) -> Backend | None:
    if "redis" in mode or "store" in mode:
        return RedisBackend(REDIS_URL, key_prefix=f"bench:{tag}:")
    if "postgres" in mode:
        return PostgresBackend(PG_URL, prefix=f"bench_{tag}_", cleanup_interval=None)
    return None


def _app(mode: str, tag: str) -> App:
    queue = unique("unique")
    backend = _backend(mode, tag)
    app = App(
        queue=queue, exchange=queue + ".x", prefetch=256, retry=RetryPolicy(delays=(60,)),
        backend=backend, debounce=backend is not None,
    )  # fmt: skip

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:  # only binds bench.job to the queue
        pass

    return app


def _options(mode: str, k: int, tag: str) -> dict[str, object]:
    if mode.startswith("unique_for"):
        return {"unique_for": 3600, "unique_key": f"{tag}:{k}"}
    if mode.startswith("debounce"):
        return {"debounce": 0.1, "unique_key": f"{tag}:{k // 10}"}
    if "delay" in mode:
        return {"delay": 0.1}
    return {}


async def _run(url: str, n: int, mode: str) -> tuple[float, float]:
    tag = uuid.uuid4().hex[:8]
    app = _app(mode, tag)
    delayed = "delay" in mode or "debounce" in mode
    async with topology(url, app) as conn:
        async with app.publisher() as pub:
            # the store connected (and its table made), the ladder declared: not timed
            await pub.publish(job(-1), **_options(mode, -1, "warm"))  # type: ignore[arg-type]
            started, cpu = clock(), time.process_time()
            for k in range(n):
                await pub.publish(job(k), **_options(mode, k, tag))  # type: ignore[arg-type]
            elapsed, cpu = clock() - started, time.process_time() - cpu
        if delayed:  # all of them in the queue before it is deleted
            await _arrived(conn, app.queue, n + 1, timeout=120)
    await _clean(app, tag)
    return n / elapsed, cpu / n * 1e6


async def _clean(app: App, tag: str) -> None:
    for step in app.publish_steps:
        await step.store.close()  # type: ignore[attr-defined]
    if app.idempotency is not None:
        await app.idempotency.close()
    if app.status_writer is not None:
        await app.status_writer.store.close()
    import psycopg
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    keys = [k async for k in client.scan_iter(match=f"bench:{tag}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as pg:
        cur = await pg.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE %s",
                               (f"bench_{tag}_%",))  # fmt: skip
        for (name,) in await cur.fetchall():
            await pg.execute(f'DROP TABLE IF EXISTS "{name}"')


async def main_async(url: str, n: int, rounds: int) -> None:
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpus: dict[str, list[float]] = {mode: [] for mode in MODES}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else reversed(MODES):
            rate, cpu = await _run(url, n, mode)
            results[mode].append(rate)
            cpus[mode].append(cpu)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    print(f"\nn={n}, rounds={rounds}, one publish at a time\n")
    print("| scenario | msg/s, median (min-max) | vs plain | client cpu us/msg | vs plain |")
    print("|---|---|---|---|---|")
    base, base_cpu = statistics.median(results["publish"]), statistics.median(cpus["publish"])
    for mode in MODES:
        ratio = statistics.median(results[mode]) / base
        cpu = statistics.median(cpus[mode])
        print(
            f"| {mode} | {spread(results[mode])} | {ratio:.2f}x | {cpu:.0f} | "
            f"{cpu / base_cpu:.2f}x |"
        )


def main() -> None:
    run_scenario(__doc__, main_async, n=1000)


if __name__ == "__main__":
    main()
