"""batches: N persistent ~200-byte typed messages, pre-published; consumed by a rabbitq
batch handler (``max_size=100``, ``max_wait=0.2``) against the same messages consumed by
a rabbitq single-message handler, both no-op async, prefetch 256, in the same run;
messages per second from the first delivery to the last ack, and the client's CPU time
per message (docs/batches.md, docs/benchmarks.md).

The handlers do nothing, so this is rabbitq's own cost per message in each mode: what a
batch saves, or costs, besides the provider calls it saves.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rabbitq import App, Worker

from .common import BenchJob, Config, SettleClock, bench_app, job, prefill, topology, unique
from .consume import candidate_on as single_on
from .consume import figures

PREFETCH = 256
MAX_SIZE = 100


async def batched_on(cfg: Config, app: App, **worker_options: Any) -> dict[str, float]:
    """Consume ``cfg.n`` messages already in ``app.queue`` with a batch handler."""

    @app.batch_handler(BenchJob, max_size=MAX_SIZE, max_wait=0.2)
    async def handle(msgs: list[BenchJob]) -> None:
        pass

    hooks = SettleClock(cfg.n)
    worker = Worker(app, url=cfg.url, hooks=hooks, **worker_options)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(hooks.done.wait(), 300)
    finally:
        worker.stop()
        await task
    return figures(cfg.n, hooks.first, hooks.last, hooks.cpu)


async def _measure(cfg: Config, side: Any) -> dict[str, float]:
    app = bench_app(unique("batches"), prefetch=PREFETCH)
    async with topology(cfg.url, app) as conn:
        await prefill(conn, app.queue, [job(n) for n in range(cfg.n)])
        return dict(await side(cfg, app))


async def single(cfg: Config) -> dict[str, float]:
    return await _measure(cfg, single_on)


async def batched(cfg: Config) -> dict[str, float]:
    return await _measure(cfg, batched_on)
