"""The service of the counted once-only tests (it runs as ``rabbitq worker
tests.effects.once_service:app`` in killable subprocesses, configured by the environment).

``mode``: ``tx`` (PostgresStore, the effect row written in ``ctx.transaction()``), ``pg``
or ``redis`` (the effect row written on a connection of its own: an effect outside the
store, like a payment gateway call). Each handled ``Pay`` writes one row into
``<prefix>effects`` and publishes one ``Paid`` follow-up (``outbox``: through the outbox,
in the transaction). ``fail_first``: the first attempt of each key writes its row and
publishes its follow-up, then fails. ``slow``: each run sleeps up to that long, so that
kills land in the middle of handlers. ``kill_at`` (``"claim:N"``, ``"done:N"`` or
``"release:N"``): the worker SIGKILLs itself right after the N-th statement of that kind
with two or more keys committed, before any caller learns of it (a group commit half
done: the store has it, the broker and the handlers do not); the keys of that batch are
appended to ``kill_log`` first.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from typing import Any

import psycopg

from rabbitq import App, Context, Message, RetryPolicy
from rabbitq.effects import Outbox, PostgresStore, RedisStore

PG = os.environ.get("ONCE_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("ONCE_REDIS", "redis://127.0.0.1:6379/0")
# The handlers' timeout (and so the claims' lease: it plus 5 s): short, so that a key whose
# worker was killed is free again soon; ONCE_TIMEOUT gives a test without kills a long
# one, where a handler stopped at its timeout after its effect would repeat the effect.
HANDLER_TIMEOUT = float(os.environ.get("ONCE_TIMEOUT") or "2.0")


class Pay(Message, type="once.pay"):
    key: str


class Paid(Message, type="once.paid"):
    key: str


class KillingPostgresStore(PostgresStore):
    """A PostgresStore that kills its process right after its N-th batch of one kind
    committed (see the module docstring)."""

    def __init__(self, *args: Any, kill_at: str, kill_log: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kind, _, nth = kill_at.partition(":")
        self.kill_kind, self.kill_nth, self.kill_log = kind, int(nth), kill_log
        self.effects = self.sql.table.removesuffix("idempotency") + "effects"
        self.batches = 0

    async def _after(self, kind: str, keys: list[str]) -> None:
        if kind != self.kill_kind or len(keys) < 2:
            return
        self.batches += 1
        if self.batches == self.kill_nth:
            # The last effect row written before the kill: the keys of this batch must
            # have none after it (a committed done mark is never undone by a kill).
            async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as conn:
                cur = await conn.execute(f"SELECT coalesce(max(id), 0) FROM {self.effects}")
                row = await cur.fetchone()
            with open(self.kill_log, "a") as log:
                log.write(f"{kind} {row[0] if row else 0} {' '.join(keys)}\n")
                log.flush()
                os.fsync(log.fileno())
            os.kill(os.getpid(), signal.SIGKILL)

    async def _claim_batch(self, batch: Any) -> Any:
        answers = await super()._claim_batch(batch)
        await self._after("claim", [c.key for c, _ in batch])
        return answers

    async def _done_batch(self, batch: Any) -> Any:
        answers = await super()._done_batch(batch)
        await self._after("done", [c.key for c in batch])
        return answers

    async def _release_batch(self, batch: Any) -> Any:
        answers = await super()._release_batch(batch)
        await self._after("release", [c.key for c in batch])
        return answers


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
    kill_at: str = "",
    kill_log: str = "",
) -> App:
    store: PostgresStore | RedisStore = (
        RedisStore(REDIS, key_prefix=prefix.replace("_", ":"))
        if mode == "redis"
        else KillingPostgresStore(
            PG, prefix=prefix, pool_size=20, kill_at=kill_at, kill_log=kill_log
        )
        if kill_at
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
    kill_at=os.environ.get("ONCE_KILL_AT", ""),
    kill_log=os.environ.get("ONCE_KILL_LOG", ""),
)
