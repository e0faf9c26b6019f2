"""The service of the counted once-only tests (it runs as ``rabbitq worker
tests.effects.once_service:app`` in killable subprocesses, configured by the environment).

``mode``: ``tx`` (PostgresStore, the effect row written in ``ctx.transaction()``), ``pg``
or ``redis`` (the effect row written on a connection of its own: an effect outside the
store, like a payment gateway call). Each handled ``Pay`` writes one row into
``<prefix>effects`` and publishes one ``Paid`` follow-up (``outbox``: through the outbox,
in the transaction). ``fail_first``: the first attempt of each key writes its row and
publishes its follow-up, then fails. ``slow``: each run sleeps up to that long, so that
kills land in the middle of handlers.
"""

from __future__ import annotations

import asyncio
import os
import random

import psycopg

from rabbitq import App, Context, Message, RetryPolicy
from rabbitq.effects import Outbox, PostgresStore, RedisStore

PG = os.environ.get("ONCE_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("ONCE_REDIS", "redis://127.0.0.1:6379/0")
HANDLER_TIMEOUT = 2.0


class Pay(Message, type="once.pay"):
    key: str


class Paid(Message, type="once.paid"):
    key: str


def build_app(
    *,
    queue: str,
    exchange: str,
    url: str | None,
    mode: str,
    prefix: str,
    outbox: bool = False,
    fail_first: bool = False,
    slow: float = 0.03,
    prefetch: int = 16,
) -> App:
    store: PostgresStore | RedisStore = (
        RedisStore(REDIS, key_prefix=prefix.replace("_", ":"))
        if mode == "redis"
        else PostgresStore(PG, prefix=prefix, pool_size=20)
    )
    app = App(
        queue=queue,
        exchange=exchange,
        url=url,
        retry=RetryPolicy(delays=(0.5, 1, 2, 2, 2, 2, 2, 2)),
        prefetch=prefetch,
        idempotency=store,
    )
    if outbox:
        Outbox(PG, app=app, prefix=prefix, poll_interval=0.05)
    effects = prefix + "effects"

    async def write(conn: psycopg.AsyncConnection, key: str, ctx: Context) -> None:
        await conn.execute(
            f"INSERT INTO {effects} (key, message_id, pid) VALUES (%s, %s, %s)",
            (key, ctx.message_id, os.getpid()),
        )

    @app.handler(Pay, timeout=HANDLER_TIMEOUT, key=lambda m: m.key)
    async def pay(msg: Pay, ctx: Context) -> None:
        # Every run is counted, outside any transaction: runs beyond one per key are the
        # handlers that a kill, a cut or a failure interrupted (or ran twice).
        async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as conn:
            await conn.execute(f"INSERT INTO {prefix}runs VALUES (%s)", (msg.key,))
        await asyncio.sleep(random.uniform(0, slow))  # room for a kill mid-handler
        fail = fail_first and ctx.attempt == 1
        if mode == "tx":
            async with ctx.transaction() as conn:
                await write(conn, msg.key, ctx)
                await ctx.publish(Paid(key=msg.key))
                await asyncio.sleep(random.uniform(0, 0.02))
                if fail:
                    raise RuntimeError("failed after writing its row")
        else:
            async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as conn:
                await write(conn, msg.key, ctx)
            await ctx.publish(Paid(key=msg.key))
            await asyncio.sleep(random.uniform(0, 0.02))
            if fail:
                raise RuntimeError("failed after its effect")

    return app


app = build_app(
    queue=os.environ.get("ONCE_QUEUE", "once"),
    exchange=os.environ.get("ONCE_EXCHANGE", "once"),
    url=os.environ.get("ONCE_URL"),
    mode=os.environ.get("ONCE_MODE", "tx"),
    prefix=os.environ.get("ONCE_PREFIX", "once_"),
    outbox=os.environ.get("ONCE_OUTBOX") == "1",
    fail_first=os.environ.get("ONCE_FAIL_FIRST") == "1",
    slow=float(os.environ.get("ONCE_SLOW", "0.03")),
    prefetch=int(os.environ.get("ONCE_PREFETCH", "16")),
)
