"""The service of the claim-lapse test (tests/chaos/test_claim_lapse.py): a batch handler
with an idempotency store, run as a worker process that the test kills with ``kill -9``
in the middle of a batch.

    python -m tests.chaos.claim_service --url URL --queue Q --exchange X --store pg|redis \
        --prefix P --ledger FILE --hold SECONDS

Each batch writes one ``start seq pid`` line per message when it starts, then sleeps
``--hold`` seconds (the batch the test kills), then one ``done seq pid`` line per message.
The handler's timeout is :data:`TIMEOUT`, long: before claims had a heartbeat, a killed
worker's keys were claimed for that long plus 5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from rabbitq import App, BatchContext, Message, RetryPolicy, Worker
from rabbitq.effects import PostgresStore, RedisStore

PG = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("RABBITQ_TEST_REDIS", "redis://127.0.0.1:6379/0")
TIMEOUT = 60.0
BATCH = 20


class Item(Message, type="chaos.claim.item"):
    seq: int


def build_app(url: str, queue: str, exchange: str, store: str, prefix: str, ledger: str,
              hold: float) -> App:  # fmt: skip
    keys = (
        RedisStore(REDIS, key_prefix=prefix.replace("_", ":"))
        if store == "redis"
        else PostgresStore(PG, prefix=prefix)
    )
    app = App(
        queue=queue,
        exchange=exchange,
        url=url,
        prefetch=2 * BATCH,
        timeout=TIMEOUT,
        # Short tiers: a key busy elsewhere is tried again every 0.2 s (without using an
        # attempt), so the time until it runs again is the claim's lapse, give or take.
        retry=RetryPolicy(delays=(0.2, 0.2, 0.2)),
        idempotency=keys,
    )
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()

    @app.batch_handler(Item, max_size=BATCH, max_wait=0.5, key=lambda m: m.seq)
    async def handle(msgs: list[Item], ctx: BatchContext) -> None:
        os.write(fd, "".join(f"start {m.seq} {pid}\n" for m in msgs).encode())
        await asyncio.sleep(hold)
        os.write(fd, "".join(f"done {m.seq} {pid}\n" for m in msgs).encode())

    return app


async def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--url", "--queue", "--exchange", "--store", "--prefix", "--ledger"):
        parser.add_argument(name, required=True)
    parser.add_argument("--hold", type=float, default=0.0)
    args = parser.parse_args()
    app = build_app(args.url, args.queue, args.exchange, args.store, args.prefix,
                    args.ledger, args.hold)  # fmt: skip
    await Worker(app, grace_period=5).run(install_signal_handlers=True)


if __name__ == "__main__":
    asyncio.run(main())
