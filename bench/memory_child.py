"""``python -m bench.memory_child baseline|rabbitq URL QUEUE PREFETCH N``: consume N
messages and print ``{"MiB": peak RSS, "growth MiB": peak - idle RSS}`` as JSON, where
idle is the RSS with everything imported, before connecting.

The baseline imports only aio-pika and orjson, as a hand-written consumer would.
"""

from __future__ import annotations

import asyncio
import json
import sys

HOLD = 0.02  # seconds each handler keeps its slot


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


async def baseline(url: str, queue: str, prefetch: int, n: int) -> float:
    import aio_pika
    import orjson

    idle = _status_mib("VmRSS")
    conn = await aio_pika.connect_robust(url)
    channel = await conn.channel()
    await channel.set_qos(prefetch_count=prefetch)
    q = await channel.get_queue(queue)
    done = asyncio.Event()
    count = 0

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        nonlocal count
        orjson.loads(message.body)
        await asyncio.sleep(HOLD)
        await message.ack()
        count += 1
        if count == n:
            done.set()

    await q.consume(on_message)
    await done.wait()
    await conn.close()
    return idle


async def candidate(url: str, queue: str, prefetch: int, n: int) -> float:
    from rabbitq import Hooks, Worker

    from .common import BenchBlob, bench_app

    app = bench_app(queue, prefetch=prefetch)
    done = asyncio.Event()
    count = 0

    @app.handler(BenchBlob)
    async def handle(msg: BenchBlob) -> None:
        await asyncio.sleep(HOLD)

    class Count(Hooks):
        def succeeded(self, queue: str, type_name: str, duration: float) -> None:
            nonlocal count
            count += 1
            if count == n:
                done.set()

    worker = Worker(app, url=url, hooks=Count())
    idle = _status_mib("VmRSS")
    await worker.start()
    await done.wait()
    worker.stop()
    await worker.shutdown()
    return idle


def main() -> None:
    side, url, queue, prefetch, n = sys.argv[1:6]
    run = baseline if side == "baseline" else candidate
    idle = asyncio.run(run(url, queue, int(prefetch), int(n)))
    peak = _status_mib("VmHWM")
    print(json.dumps({"MiB": round(peak, 2), "growth MiB": round(peak - idle, 2)}))


if __name__ == "__main__":
    main()
