"""The service of the network partition chaos test (tests/chaos/test_netns_partitions.py),
run as ``rabbitq worker tests.chaos.netns_service:app`` in three processes.

Configured by the environment (``NETNS_*``, written by :func:`environment`). Each
``Order`` is handled once per key with a :class:`~rabbitq.effects.PostgresStore`: the
handler writes one row into ``<prefix>effects`` in ``ctx.transaction()``, so the row and
the key's done mark commit together, and records its message id in the scenario's
:class:`~tests.chaos.ledger.Ledger` (every run that returned: a repeat is a duplicate
handling). Which messages fail is decided by their number, so that the test knows the
outcome each must have: every fifth fails its first attempt (the retry queues carry it
through the partition), one in fifty is refused for good (the DLQ). A schedule fires every
second (``catch_up="all"``); its ticks go to a queue of the test's own, not to ``app``'s.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta

from rabbitq import App, Context, Message, PermanentError, RetryPolicy
from rabbitq.effects import PostgresStore

from .ledger import Ledger

PG = os.environ.get("NETNS_PG", "postgresql://postgres@127.0.0.1:5432/test")


class Order(Message, type="netns.order"):
    n: int
    key: str


class Tick(Message, type="netns.tick"):
    at: str


def fails_first(n: int) -> bool:
    """Order ``n`` fails its first attempt (and is retried)."""
    return n % 5 == 0


def refused(n: int) -> bool:
    """Order ``n`` is refused for good (PermanentError: dead-lettered)."""
    return n % 50 == 7


def environment(*, queue: str, exchange: str, prefix: str, ledger: str, pg: str) -> dict[str, str]:
    return {
        "NETNS_QUEUE": queue,
        "NETNS_EXCHANGE": exchange,
        "NETNS_PREFIX": prefix,
        "NETNS_LEDGER": ledger,
        "NETNS_PG": pg,
    }


def build_app(*, queue: str, exchange: str, prefix: str, ledger: str, url: str | None) -> App:
    app = App(
        queue=queue,
        exchange=exchange,
        url=url,
        prefetch=16,
        retry=RetryPolicy(delays=(0.5, 1, 2, 2, 2, 2, 2, 2)),
        idempotency=PostgresStore(PG, prefix=prefix, pool_size=10),
    )
    record = Ledger(ledger)
    effects = f"{prefix}effects"

    @app.handler(Order, key=lambda m: m.key, timeout=30)
    async def order(msg: Order, ctx: Context) -> None:
        started = time.time()
        if refused(msg.n):
            raise PermanentError("netns chaos: refused for good")
        if fails_first(msg.n) and ctx.attempt == 1:
            raise RuntimeError("netns chaos: planned failure of the first attempt")
        async with ctx.transaction() as conn:
            await conn.execute(
                f"INSERT INTO {effects} (key, message_id, pid) VALUES (%s, %s, %s)",
                (msg.key, ctx.message_id, os.getpid()),
            )
        record.record(ctx.message_id, started)

    @app.schedule(every=timedelta(seconds=1), catch_up="all")
    def every_second(tick: datetime) -> Tick:
        return Tick(at=tick.isoformat())

    return app


app = build_app(
    queue=os.environ.get("NETNS_QUEUE", "netns-chaos"),
    exchange=os.environ.get("NETNS_EXCHANGE", "netns-chaos"),
    prefix=os.environ.get("NETNS_PREFIX", "netns_"),
    ledger=os.environ.get("NETNS_LEDGER", os.devnull),
    url=None,
)
