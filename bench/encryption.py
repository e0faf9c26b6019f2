"""encryption: what ``App(encryption=Keyring(...))`` costs (``python -m bench.encryption``,
docs/benchmarks.md).

In one run, for a clear app and an encrypted one (AES-256-GCM, the same ~200-byte
``BenchJob`` bodies): **publish** ``n`` messages with ``publish_many`` (confirms
pipelined, 512 in flight), then **consume** them with a no-op async handler at prefetch
256 (as the ``consume`` scenario: first delivery to the n-th ack, from the worker's own
hooks). Rounds alternate the order; the table shows the median (min-max) msg/s and CPU
us/msg, and each as a ratio to the clear app's median.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from rabbitq import App, RetryPolicy, Worker
from rabbitq.crypto import Keyring

from .common import BenchJob, SettleClock, job, run_scenario, spread, topology
from .common import unique as unique_queue

PREFETCH = 256
MODES = ("clear", "encrypted")
KEYS = Keyring({"bench": Keyring.generate_key()})


async def one(url: str, n: int, mode: str) -> dict[str, tuple[float, float]]:
    """``{"publish": (msg/s, CPU us/msg), "consume": (...)}`` of ``n`` messages in ``mode``."""
    queue = unique_queue("crypto")
    app = App(
        queue=queue,
        exchange=queue + ".x",
        prefetch=PREFETCH,
        retry=RetryPolicy(delays=(60,)),
        encryption=KEYS if mode == "encrypted" else None,
    )

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:
        pass

    messages = [job(i) for i in range(n)]
    async with topology(url, app):
        async with app.publisher(url=url) as pub:
            await pub.publish_many(messages[:100])  # connected and warm: not measured
            wall, cpu = time.perf_counter(), time.process_time()
            await pub.publish_many(messages[100:])
            published = n - 100
            publish = (
                published / (time.perf_counter() - wall),
                (time.process_time() - cpu) / published * 1e6,
            )
        hooks = SettleClock(n)
        worker = Worker(app, url=url, hooks=hooks)
        task = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(hooks.done.wait(), 600)
        finally:
            worker.stop()
            await task
    assert hooks.first is not None and hooks.last is not None
    consume = (n / (hooks.last - hooks.first), (hooks.cpu[1] - hooks.cpu[0]) / n * 1e6)
    return {"publish": publish, "consume": consume}


async def main_async(url: str, n: int, rounds: int) -> None:
    rates: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
            for side, (rate, cpu) in (await one(url, n, mode)).items():
                rates.setdefault((side, mode), []).append(rate)
                cpus.setdefault((side, mode), []).append(cpu)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    print(f"\nn={n}, rounds={rounds}, prefetch {PREFETCH}, AES-256-GCM\n")
    print("| scenario | msg/s, median (min-max) | vs clear | CPU us/msg | vs clear |")
    print("|---|---|---|---|---|")
    for side in ("publish", "consume"):
        base = statistics.median(rates[(side, "clear")])
        base_cpu = statistics.median(cpus[(side, "clear")])
        for mode in MODES:
            rate = statistics.median(rates[(side, mode)])
            cpu = statistics.median(cpus[(side, mode)])
            print(
                f"| {side}, {mode} | {spread(rates[(side, mode)])} | {rate / base:.2f}x "
                f"| {cpu:.0f} | {cpu / base_cpu:.2f}x |"
            )


def main() -> None:
    run_scenario(__doc__, main_async, n=5000)


if __name__ == "__main__":
    main()
