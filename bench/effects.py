"""effects: what once-only effects cost (``python -m bench.effects``, docs/benchmarks.md).

1. Consume N pre-published messages with a no-op async handler at prefetch 256 (as the
   ``consume`` scenario), with no idempotency store, a RedisStore, a PostgresStore, and a
   PostgresStore in transactional mode (the handler opens ``ctx.transaction()`` and
   inserts one row), and with no store but a handler that runs that same transaction
   itself (``own transaction``: what the transaction costs without once-only). Each
   message is a distinct key, so every one is claimed and marked done: the full cost,
   not the duplicate path.
2. The outbox relay's throughput against ``publish_many``: N rows already in the outbox
   published and marked sent, against N messages published with pipelined confirms.

Rounds alternate the order of the modes; the table shows the median (min-max) msg/s and
the ratio to the no-store (or publish_many) median. PostgreSQL and Redis are the local
ones (``$RABBITQ_TEST_PG``, ``$RABBITQ_TEST_REDIS``); every table and key prefix is
unique and dropped.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import uuid
from typing import Any

import psycopg
import redis.asyncio as aioredis
from psycopg_pool import AsyncConnectionPool

from rabbitq import App, Context, Worker
from rabbitq.effects import Outbox, PostgresStore, RedisStore
from rabbitq.effects.relay import Relay

from .common import (
    BenchJob,
    SettleClock,
    bench_app,
    clock,
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
# PostgreSQL connections per store: far fewer than the handlers in flight (max_connections
# is 100 by default, shared); a claim or a transaction waits for a free one.
POOL = 16
MODES = ("no store", "redis", "postgres", "postgres transactional", "own transaction")
"""``own transaction``: no store; the handler runs the transactional mode's transaction
itself (a pooled connection, ``BEGIN``, the ``INSERT``, ``COMMIT``): the same database
work without once-only, so the transactional mode's cost of once-only is the ratio of
the two."""


async def consume(url: str, n: int, mode: str) -> tuple[float, float]:
    """msg/s consuming ``n`` messages in ``mode``, and the process's CPU us per message
    (the worker's and the store client's, not the broker's nor the database's)."""
    prefix = f"bench_{uuid.uuid4().hex[:8]}_"
    store: Any = None
    if mode == "redis":
        store = RedisStore(REDIS, key_prefix=prefix.replace("_", ":"))
    elif mode.startswith("postgres"):
        store = PostgresStore(PG, prefix=prefix, pool_size=POOL, cleanup_interval=None)
    app: App = bench_app(unique_queue("effects"), prefetch=PREFETCH)
    app.idempotency = store
    table = prefix + "effects"
    pool: AsyncConnectionPool[Any] | None = None

    if mode == "own transaction":
        pool = AsyncConnectionPool(
            PG, min_size=POOL, max_size=POOL, open=False, kwargs={"autocommit": True}
        )

        @app.handler(BenchJob)
        async def handle_own(msg: BenchJob) -> None:
            assert pool is not None
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(f"INSERT INTO {table} VALUES (%s)", (msg.n,))

    elif mode == "postgres transactional":

        @app.handler(BenchJob)
        async def handle_tx(msg: BenchJob, ctx: Context) -> None:
            async with ctx.transaction() as conn:
                await conn.execute(f"INSERT INTO {table} VALUES (%s)", (msg.n,))
    else:

        @app.handler(BenchJob)
        async def handle(msg: BenchJob) -> None:
            pass

    try:
        if store is not None:
            await store.open()
        if pool is not None:
            await pool.open(wait=True)
        if mode in ("postgres transactional", "own transaction"):
            async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as pg:
                await pg.execute(f"CREATE TABLE {table} (n int)")
        async with topology(url, app) as conn:
            await prefill(conn, app.queue, [job(i) for i in range(n)])
            hooks = SettleClock(n)
            worker = Worker(app, url=url, hooks=hooks)
            task = asyncio.create_task(worker.run())
            try:
                await asyncio.wait_for(hooks.done.wait(), 600)
            finally:
                worker.stop()
                await task
        assert hooks.first is not None and hooks.last is not None
        return n / (hooks.last - hooks.first), (hooks.cpu[1] - hooks.cpu[0]) / n * 1e6
    finally:
        if pool is not None:
            await pool.close()
        await _cleanup(store, prefix)


async def _cleanup(store: Any, prefix: str) -> None:
    if store is not None:
        await store.close()
    async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as pg:
        cur = await pg.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (prefix + "%",)
        )
        for (name,) in await cur.fetchall():
            await pg.execute(f'DROP TABLE IF EXISTS "{name}"')
    client = aioredis.Redis.from_url(REDIS)
    async for key in client.scan_iter(match=prefix.replace("_", ":") + "*", count=1000):
        await client.delete(key)
    await client.aclose()


async def relay(url: str, n: int) -> float:
    """msg/s of the outbox relay publishing ``n`` pending rows and marking them sent."""
    prefix = f"bench_{uuid.uuid4().hex[:8]}_"
    app = bench_app(unique_queue("outbox"))
    app.handler(BenchJob)(lambda m: None)
    outbox = Outbox(PG, app=app, prefix=prefix, poll_interval=0.01)
    try:
        async with topology(url, app):
            async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as pg:
                async with pg.transaction():
                    for i in range(n):
                        await outbox.publish(pg, job(i))
            runner = Relay(outbox, url=url)
            started = clock()
            task = asyncio.create_task(runner.run())
            while (await outbox.stats())[0] > 0:
                await asyncio.sleep(0.01)
            elapsed = clock() - started
            runner.stop()
            await task
        return n / elapsed
    finally:
        await outbox.close()
        await _cleanup(None, prefix)


async def publish_many(url: str, n: int) -> float:
    """msg/s of ``publish_many`` (pipelined confirms) for ``n`` messages."""
    app = bench_app(unique_queue("outbox"))
    app.handler(BenchJob)(lambda m: None)
    async with topology(url, app), app.publisher(url=url) as pub:
        started = clock()
        await pub.publish_many([job(i) for i in range(n)])
        return n / (clock() - started)


async def main_async(url: str, n: int, rounds: int) -> None:
    results: dict[str, list[float]] = {m: [] for m in (*MODES, "publish_many", "outbox relay")}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(rounds):
        order = MODES if r % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            rate, us = await consume(url, n, mode)
            results[mode].append(rate)
            cpu[mode].append(us)
        pair = ("publish_many", "outbox relay") if r % 2 == 0 else ("outbox relay", "publish_many")
        for name in pair:
            fn = publish_many if name == "publish_many" else relay
            results[name].append(await fn(url, n))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    base = statistics.median(results["no store"])
    pm = statistics.median(results["publish_many"])
    print(f"\nn={n}, rounds={rounds}, prefetch {PREFETCH}\n")
    print("| scenario | msg/s, median (min-max) | vs baseline | client CPU us/msg |")
    print("|---|---|---|---|")
    for mode in MODES:
        ratio = statistics.median(results[mode]) / base
        print(
            f"| consume, {mode} | {spread(results[mode])} | {ratio:.2f}x no store"
            f" | {statistics.median(cpu[mode]):.0f} |"
        )
    once = statistics.median(results["postgres transactional"])
    own = statistics.median(results["own transaction"])
    print(f"| transactional once-only against the same transaction without it | | "
          f"{once / own:.2f}x own transaction | |")  # fmt: skip
    print(f"| publish_many | {spread(results['publish_many'])} | 1.00x | |")
    ratio = statistics.median(results["outbox relay"]) / pm
    print(f"| outbox relay | {spread(results['outbox relay'])} | {ratio:.2f}x publish_many | |")


def main() -> None:
    run_scenario(__doc__, main_async, n=5000)


if __name__ == "__main__":
    main()
