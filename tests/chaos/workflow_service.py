"""The service of the counted workflow proof (``tests/chaos/workflow_proof.py``): it runs
as ``rabbitq worker tests.chaos.workflow_service:app`` in killable subprocesses,
configured by the environment (``WF_*``).

``Item`` is a chord member: its first attempt fails when ``fail_first``; a success adds
its index to the Redis set ``<prefix>done:<chord>`` (before the handler returns, so
before it can be counted) and returns ``{"i": i}``. ``Finish`` is the callback: it
records its chord, its message id, how many members the set held when it ran and
whether ``ctx.chord_results()`` was every member's result, in ``<prefix>finish`` (Redis),
or in mode ``postgres`` as a row of :func:`finish_table` written in
``ctx.transaction()``, with the done mark (so exactly once). ``Step``
is a chain step: it appends its number to ``<prefix>chain:<chain>``; step 3 raises
``PermanentError`` unless it is a replay.
"""

from __future__ import annotations

import asyncio
import os
import random

import orjson
import redis.asyncio as aioredis

from rabbitq import App, Context, Message, PermanentError, RetryPolicy
from rabbitq.effects import PostgresStore, RedisStore

REDIS = os.environ.get("WF_REDIS", "redis://127.0.0.1:6379/0")
PG = os.environ.get("WF_PG", "postgresql://postgres@127.0.0.1:5432/test")
MEMBERS = 10


class Item(Message, type="wfproof.item"):
    chord: str
    i: int
    fail_first: bool = False


class Finish(Message, type="wfproof.finish"):
    chord: str


class Step(Message, type="wfproof.step"):
    chain: str
    n: int


def finish_table(prefix: str) -> str:
    """The PostgreSQL table of the callbacks' runs (mode ``postgres``)."""
    return prefix.replace(":", "_") + "finish"


def build_app(
    *, queue: str, exchange: str, url: str, mode: str, prefix: str, slow: float
) -> App:
    store: PostgresStore | RedisStore
    if mode == "postgres":
        store = PostgresStore(PG, prefix=prefix.replace(":", "_"), cleanup_interval=None)
    else:
        store = RedisStore(REDIS, key_prefix=prefix + "idem:")
    app = App(
        queue=queue,
        exchange=exchange,
        url=url,
        prefetch=16,
        timeout=2.0,  # the idempotency lease of a killed worker's message: 7 s
        retry=RetryPolicy(delays=(0.2, 0.5, 1, 2, 4, 8, 8, 8)),
        idempotency=store,
        status=store,
    )
    clients: dict[int, aioredis.Redis] = {}

    def redis() -> aioredis.Redis:
        loop = id(asyncio.get_running_loop())
        if loop not in clients:
            clients[loop] = aioredis.Redis.from_url(REDIS)
        return clients[loop]

    @app.handler(Item)
    async def item(msg: Item, ctx: Context) -> dict[str, int]:
        if slow:
            await asyncio.sleep(random.uniform(0, slow))
        if msg.fail_first and ctx.attempt == 1:
            raise OSError("gateway down (first attempt)")
        await redis().sadd(f"{prefix}done:{msg.chord}", msg.i)
        return {"i": msg.i}

    @app.handler(Finish)
    async def finish(msg: Finish, ctx: Context) -> None:
        seen = await redis().scard(f"{prefix}done:{msg.chord}")
        results = await ctx.chord_results()
        complete = results == [{"i": i} for i in range(MEMBERS)]
        row = [msg.chord, ctx.message_id, seen, complete, os.getpid()]
        if mode == "postgres":  # the effect and the done mark commit together
            async with ctx.transaction() as conn:
                await conn.execute(
                    f"INSERT INTO {finish_table(prefix)} (row) VALUES (%s)",
                    (orjson.dumps(row).decode(),),
                )
        else:  # an effect outside the store: once but for a kill before the done mark
            await redis().rpush(f"{prefix}finish", orjson.dumps(row))

    @app.handler(Step)
    async def step(msg: Step, ctx: Context) -> None:
        if msg.n == 3 and not ctx.headers.get("rabbitq-replayed"):
            raise PermanentError("step 3 fails until it is replayed")
        await redis().rpush(f"{prefix}chain:{msg.chain}", msg.n)

    return app


app = build_app(
    queue=os.environ.get("WF_QUEUE", "wfproof"),
    exchange=os.environ.get("WF_EXCHANGE", "wfproof.x"),
    url=os.environ.get("WF_URL", "amqp://guest:guest@127.0.0.1:5672/"),
    mode=os.environ.get("WF_MODE", "redis"),
    prefix=os.environ.get("WF_PREFIX", "wfproof:"),
    slow=float(os.environ.get("WF_SLOW", "0.02")),
)
