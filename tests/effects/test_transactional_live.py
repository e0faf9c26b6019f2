"""Transactional mode through a real worker, broker and PostgreSQL, counted: a follow-up
the handler asked for is delivered even when its first send fails, and a step after the
``ctx.transaction()`` block that fails is retried with the block, never acked unrun."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from rabbitq import App, Context, Message, RetryPolicy, Worker
from rabbitq.effects import PostgresStore

from ..helpers import Recorder, drain_queue, running, wait_for

pytestmark = pytest.mark.broker

N = 40


class Capture(Message, type="txlive.capture"):
    n: int


class Captured(Message, type="txlive.captured"):
    n: int


class Counting(Recorder):
    def duplicate(self, queue: str, type_name: str) -> None:
        self.events.append(("duplicate", type_name))


async def _effect_rows(pg, table: str) -> Counter[int]:
    cur = await pg.execute(f"SELECT n FROM {table}")
    return Counter(r[0] for r in await cur.fetchall())


@pytest.fixture
async def effects_table(pg, prefix):
    table = prefix + "captures"
    await pg.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, n int NOT NULL)")
    return table


async def test_follow_ups_published_in_a_transaction_without_an_outbox_survive_a_failed_send(
    make_app, make_pg_store, connection, pg, effects_table, uid
) -> None:
    """The follow-up's type is bound to a queue only after the first sends failed
    (unroutable): every follow-up still arrives, exactly once, and every effect is once."""
    store: PostgresStore = make_pg_store()
    app: App = make_app(retry=RetryPolicy(delays=(1,) * 8), idempotency=store)

    @app.handler(Capture)
    async def capture(msg: Capture, ctx: Context) -> None:
        async with ctx.transaction() as conn:
            await conn.execute(f"INSERT INTO {effects_table} (n) VALUES (%s)", (msg.n,))
            await ctx.publish(Captured(n=msg.n))

    channel = await connection.channel()
    exchange = await channel.declare_exchange(app.exchange, "topic", durable=True)
    sink = await channel.declare_queue(f"t.{uid}.captured", durable=True)
    rec = Counting()
    try:
        async with running(Worker(app, hooks=rec)):
            async with app.publisher() as pub:
                for n in range(N):
                    await pub.publish(Capture(n=n), message_id=f"cap-{n}")
            # every first attempt ran and failed its send: nothing is bound yet
            await wait_for(lambda: rec.count("retried") >= N, timeout=30)
            await sink.bind(exchange, routing_key=Captured.type_name())
            await wait_for(lambda: rec.count("succeeded") + rec.count("duplicate") >= N, timeout=40)
            await asyncio.sleep(0.5)  # a late follow-up would show up now
        follow_ups = await drain_queue(connection, sink.name)
        effects = await _effect_rows(pg, effects_table)
        ids = Counter(m.message_id for m in follow_ups)
        print(
            f"transactional follow-ups, failed first send: messages={N} "
            f"effects={sum(effects.values())} follow-ups={len(follow_ups)} "
            f"unique={len(ids)} retried={rec.count('retried')} "
            f"duplicates={rec.count('duplicate')}"
        )
        assert effects == Counter(range(N))  # each effect once
        assert len(ids) == N and all(c == 1 for c in ids.values())  # each follow-up once
        assert rec.count("dead_lettered") == 0
    finally:
        await sink.delete(if_unused=False, if_empty=False)
        await channel.close()


async def test_a_step_after_the_transaction_block_that_fails_once_runs_on_the_retry(
    make_app, make_pg_store, pg, effects_table
) -> None:
    """Code after ``async with ctx.transaction()`` that fails once: the retry runs it
    (40 of 40), the block's writes count once, and no delivery is acked unrun."""
    store: PostgresStore = make_pg_store()
    app: App = make_app(retry=RetryPolicy(delays=(1,) * 3), idempotency=store)
    failed_once: set[int] = set()
    completed: Counter[int] = Counter()

    @app.handler(Capture)
    async def capture(msg: Capture, ctx: Context) -> None:
        async with ctx.transaction() as conn:
            await conn.execute(f"INSERT INTO {effects_table} (n) VALUES (%s)", (msg.n,))
        if msg.n not in failed_once:  # the post-commit step fails the first time
            failed_once.add(msg.n)
            raise RuntimeError("the step after the transaction failed")
        completed[msg.n] += 1

    rec = Counting()
    async with running(Worker(app, hooks=rec)):
        async with app.publisher() as pub:
            for n in range(N):
                await pub.publish(Capture(n=n), message_id=f"step-{n}")
        await wait_for(
            lambda: (
                rec.count("succeeded") + rec.count("duplicate") + rec.count("dead_lettered") >= N
            ),
            timeout=40,
        )
    effects = await _effect_rows(pg, effects_table)
    print(
        f"step after the transaction block, failing once: messages={N} "
        f"steps completed={sum(completed.values())} effects={sum(effects.values())} "
        f"duplicates acked unrun={rec.count('duplicate')}"
    )
    assert completed == Counter(range(N))  # every post-commit step ran, once
    assert effects == Counter(range(N))  # the block's write counts once
    assert rec.count("duplicate") == 0 and rec.count("dead_lettered") == 0
