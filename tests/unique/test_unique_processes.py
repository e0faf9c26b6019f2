"""The issue's counted proof of unique publishes: 10,000 publishes of 1,000 unique keys
from 4 processes (each its own publisher and its own connections to the store), then a
worker: each key's handler runs once, with PostgreSQL and with Redis."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter

import pytest

from rabbitq import Context, Worker
from rabbitq.backends import RedisBackend
from tests.helpers import ROOT, Recorder, declare_topology, running, wait_for
from tests.unique.conftest import Capture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
PROCESSES, PUBLISHES, KEYS = 4, 10_000, 1_000

PRODUCER = """
import asyncio, random, sys
from rabbitq import App
from rabbitq.backends import PostgresBackend, RedisBackend
from tests.unique.conftest import Capture

queue, exchange, url, backend, seed, count, keys = sys.argv[1:8]
app = App(queue=queue, exchange=exchange, url=url, backend=eval(backend))
app.handler(Capture)(lambda msg: None)


async def main():
    order = [i % int(keys) for i in range(int(count))]
    random.Random(int(seed)).shuffle(order)
    sem = asyncio.Semaphore(16)
    async with app.publisher() as pub:
        async def one(k):
            async with sem:
                return await pub.publish(
                    Capture(order_id=k), unique_for=3600, unique_key=f"capture:{k}"
                )
        ids = await asyncio.gather(*(one(k) for k in order))
    for step in app.publish_steps:
        await step.store.close()
    print(len(set(ids)))

asyncio.run(main())
"""


async def test_four_processes_publishing_1000_keys_run_each_handler_once(
    make_keyed, connection, backend, broker_url
):
    app = make_keyed(handler=False)
    runs: Counter[int] = Counter()

    @app.handler(Capture)
    async def capture(msg: Capture, ctx: Context) -> None:
        runs[msg.order_id] += 1

    await declare_topology(connection, app)
    where = backend.location
    made = (
        f"RedisBackend({where.url!r}, key_prefix={where.base!r})"
        if isinstance(backend, RedisBackend)
        else f"PostgresBackend({where.dsn!r}, prefix={where.prefix!r})"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    producers = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", PRODUCER, app.queue, app.exchange, broker_url, made,
            str(p), str(PUBLISHES // PROCESSES), str(KEYS),
            cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        for p in range(PROCESSES)
    ]
    outputs = [await p.communicate() for p in producers]
    for p, (out, err) in zip(producers, outputs, strict=True):
        assert p.returncode == 0, err.decode()[-3000:]
        assert int(out) == KEYS  # every key answered with one id, in each process
    recorder = Recorder()
    async with running(Worker(app, hooks=recorder)):
        await wait_for(lambda: recorder.count("succeeded") >= KEYS, timeout=120)
        await asyncio.sleep(1.0)  # nothing more comes
    twice = sum(1 for c in runs.values() if c > 1)
    print(
        f"\n{PUBLISHES} publishes of {KEYS} keys from {PROCESSES} processes: "
        f"{sum(runs.values())} handler runs, {len(runs)} keys, run twice {twice}"
    )
    assert sum(runs.values()) == KEYS and set(runs) == set(range(KEYS))
