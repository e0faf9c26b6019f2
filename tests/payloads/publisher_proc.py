"""A publisher of 20 MiB reports into an app with a large-payload store, in a loop until
killed: ``python -m tests.payloads.publisher_proc URL EXCHANGE QUEUE PG_DSN PREFIX``. It
prints "uploading N" before each publish and "confirmed N" after, flushed, so that the
test can kill it at every stage of a publish (during the upload, between upload and
confirm, after the confirm)."""

from __future__ import annotations

import asyncio
import sys

from rabbitq import App
from rabbitq.payloads import PostgresBlobs

from .test_large_payloads import Report, big


async def main(url: str, exchange: str, queue: str, dsn: str, prefix: str) -> None:
    store = PostgresBlobs(dsn, above=64 * 1024, prefix=prefix, orphan_after=0)
    app = App(queue=queue, exchange=exchange, url=url, large_payloads=store)
    content = big(20 * 1024 * 1024)
    n = 0
    async with app.publisher() as pub:
        while True:
            print(f"uploading {n}", flush=True)
            await pub.publish(Report(name=f"r{n}", content=content))
            print(f"confirmed {n}", flush=True)
            n += 1


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
