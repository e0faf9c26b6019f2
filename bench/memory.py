"""memory: the worker's peak RSS while it works through 1 KiB messages at prefetch 256
and 2 048, each handler holding its slot for 20 ms so that every slot fills.

Each side runs in a fresh process (:mod:`bench.memory_child`), which reports its peak
RSS (``VmHWM``) and the growth over its RSS once connected and idle.
Baseline: a raw aio-pika consumer (decode JSON, sleep, ack) in the same conditions.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable

from .common import BenchBlob, Config, bench_app, blob, prefill, topology, unique


def _count(cfg: Config, prefetch: int) -> int:
    return max(cfg.small, 2 * prefetch)


async def _measure(cfg: Config, side: str, prefetch: int) -> dict[str, float]:
    app = bench_app(unique("memory"), prefetch=prefetch)

    @app.handler(BenchBlob)
    async def handle(msg: BenchBlob) -> None:  # binds bench.blob; the child's twin runs
        pass

    n = _count(cfg, prefetch)
    async with topology(cfg.url, app) as conn:
        await prefill(conn, app.queue, [blob(i) for i in range(n)])
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.memory_child",
            side,
            cfg.url,
            app.queue,
            str(prefetch),
            str(n),
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
        if proc.returncode != 0:
            raise RuntimeError(f"memory child ({side}) exited with {proc.returncode}")
    return {k: float(v) for k, v in json.loads(out).items()}


def baseline(prefetch: int) -> Callable[[Config], Awaitable[dict[str, float]]]:
    async def run(cfg: Config) -> dict[str, float]:
        return await _measure(cfg, "baseline", prefetch)

    return run


def candidate(prefetch: int) -> Callable[[Config], Awaitable[dict[str, float]]]:
    async def run(cfg: Config) -> dict[str, float]:
        return await _measure(cfg, "rabbitq", prefetch)

    return run
