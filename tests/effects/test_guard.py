"""run_once: claim, run, send follow-ups, mark done or release; follow-up properties."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from rabbitq import Message, RetryPolicy
from rabbitq.effects import StoreUnavailable
from rabbitq.effects.followups import CAUSATION_ID, follow_up_id
from rabbitq.effects.guard import (
    BUSY_ELSEWHERE,
    DUPLICATE,
    RAN,
    Effects,
    busy_decision,
    key_of,
    run_once,
)
from rabbitq.effects.store import DONE, NEW
from rabbitq.outcome import Retry


class Captured(Message, type="guard.captured"):
    n: int


def effects_for(store, key="k", correlation_id=None, outbox=None) -> Effects:
    return Effects(
        message_id="m-1", correlation_id=correlation_id, key=key, store=store, outbox=outbox
    )


class Sent:
    def __init__(self, fail: bool = False) -> None:
        self.batches: list[list] = []
        self.fail = fail

    async def __call__(self, follow_ups) -> None:
        if self.fail:
            raise RuntimeError("broker down")
        self.batches.append(list(follow_ups))


def test_a_busy_key_waits_in_the_shortest_tier_without_using_an_attempt() -> None:
    assert busy_decision(RetryPolicy(delays=(10, 1)), attempt=3) == Retry(1000, 3, deferred=True)
    assert busy_decision(RetryPolicy(delays=()), attempt=1) is None


def test_the_key_is_the_key_functions_answer_as_text_else_the_message_id() -> None:
    assert key_of(None, object(), "mid") == "mid"
    assert key_of(lambda m: 42, object(), "mid") == "42"


def test_follow_ups_carry_correlation_and_causation_and_stable_ids() -> None:
    fx = effects_for(None, key="pay-9", correlation_id=None)
    asyncio.run(fx.publish(Captured(n=1)))
    (f,) = fx.follow_ups
    assert f.correlation_id == "m-1"  # no incoming correlation id: the message id
    assert f.headers[CAUSATION_ID] == "m-1"
    assert f.message_id == follow_up_id("pay-9", 1)
    fx2 = effects_for(None, correlation_id="corr")
    asyncio.run(fx2.publish(Captured(n=1)))
    assert fx2.follow_ups[0].correlation_id == "corr"


async def test_a_success_sends_its_follow_ups_then_marks_done_and_a_duplicate_runs_nothing(
    make_store,
) -> None:
    store = make_store()
    sent = Sent()
    calls = []

    async def handler_of(fx):
        async def call():
            calls.append(1)
            await fx.publish(Captured(n=1))
            await fx.publish(Captured(n=2))

        return call

    fx = effects_for(store)
    assert await run_once(fx, await handler_of(fx), sent, lease=30) == RAN
    assert [len(b) for b in sent.batches] == [2]
    fx = effects_for(store)
    assert await run_once(fx, await handler_of(fx), sent, lease=30) == DUPLICATE
    assert calls == [1] and [len(b) for b in sent.batches] == [2]
    assert (await store.claim("k", lease=30)).status is DONE


async def test_a_failing_handler_publishes_nothing_and_releases_its_key(make_store) -> None:
    store = make_store()
    sent = Sent()
    fx = effects_for(store)

    async def fail():
        await fx.publish(Captured(n=1))
        raise RuntimeError("declined")

    with pytest.raises(RuntimeError):
        await run_once(fx, fail, sent, lease=30)
    assert sent.batches == []
    assert (await store.claim("k", lease=30)).status is NEW


async def test_follow_ups_that_cannot_be_sent_fail_the_attempt_and_release_the_key(
    make_store,
) -> None:
    store = make_store()
    fx = effects_for(store)

    async def ok():
        await fx.publish(Captured(n=1))

    with pytest.raises(RuntimeError, match="broker down"):
        await run_once(fx, ok, Sent(fail=True), lease=30)
    assert (await store.claim("k", lease=30)).status is NEW


async def test_a_key_busy_elsewhere_is_not_run(make_store, monkeypatch) -> None:
    monkeypatch.setattr("rabbitq.effects.guard.BUSY_WAIT", 0.2)
    store = make_store()
    await store.claim("k", lease=30)
    ran = []

    async def call():
        ran.append(1)

    assert await run_once(effects_for(store), call, Sent(), lease=30) == BUSY_ELSEWHERE
    assert ran == []


async def test_a_store_outage_is_a_failed_attempt_and_the_handler_does_not_run(
    make_pg_store,
) -> None:
    store = make_pg_store(dsn="postgresql://postgres@127.0.0.1:1/test", timeout=1)
    ran = []

    async def call():
        ran.append(1)

    with pytest.raises(StoreUnavailable):
        await run_once(effects_for(store), call, Sent(), lease=30)
    assert ran == []


async def test_a_cancelled_handler_still_releases_its_key(make_store) -> None:
    store = make_store()
    started = asyncio.Event()

    async def slow():
        started.set()
        await asyncio.sleep(30)

    task = asyncio.create_task(run_once(effects_for(store), slow, Sent(), lease=30))
    # Cancelled in the handler, not in its claim (a first claim opens the pool and
    # creates the table: more than 0.2 s on a loaded machine).
    await asyncio.wait_for(started.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await store.claim("k", lease=30)).status is NEW


async def test_in_transactional_mode_follow_ups_become_outbox_rows_of_the_transaction(
    make_pg_store, make_outbox, pg, prefix
) -> None:
    from rabbitq import App

    app = App(queue="q.unused", exchange="x.unused")
    outbox = make_outbox(app)
    store = make_pg_store()
    table = prefix + "effects"
    await pg.execute(f"CREATE TABLE {table} (key text)")

    def make(fail: bool):
        fx = effects_for(store, outbox=outbox)

        async def call():
            await fx.publish(Captured(n=0))  # before the block: moved into the outbox too
            async with fx.transaction() as conn:
                await conn.execute(f"INSERT INTO {table} VALUES ('k')")
                await fx.publish(Captured(n=1))
                if fail:
                    raise RuntimeError("after the write")

        return fx, call

    sent = Sent()
    fx, call = make(fail=True)
    with pytest.raises(RuntimeError):
        await run_once(fx, call, sent, lease=30)
    assert (await outbox.stats())[0] == 0
    fx, call = make(fail=False)
    assert await run_once(fx, call, sent, lease=30) == RAN
    assert (await outbox.stats())[0] == 2
    assert sent.batches == []  # nothing left for the worker to send
    cur = await pg.execute(f"SELECT count(*) FROM {table}")
    assert (await cur.fetchone())[0] == 1
    assert (await store.claim("k", lease=30)).status is DONE


@pytest.fixture
async def rows_table(pg, prefix):
    table = prefix + "rows"
    await pg.execute(f"CREATE TABLE {table} (key text)")

    async def count() -> int:
        cur = await pg.execute(f"SELECT count(*) FROM {table}")
        return (await cur.fetchone())[0]

    return table, count


async def key_state(pg, store, key: str = "k") -> str | None:
    """The key's state in the store's table (None: absent, so a retry runs), read
    without claiming it."""
    cur = await pg.execute(f"SELECT state FROM {store.sql.table} WHERE key = %s", (key,))
    row = await cur.fetchone()
    return row[0] if row else None


async def test_without_an_outbox_a_transactions_follow_ups_are_confirmed_before_it_commits(
    make_pg_store, pg, rows_table
) -> None:
    """A send that fails rolls the transaction back and frees the key, so the retry runs
    (and sends): the follow-ups are never lost behind a key already marked done."""
    table, rows = rows_table
    store = make_pg_store()

    def make():
        fx = effects_for(store)

        async def call():
            async with fx.transaction() as conn:
                await conn.execute(f"INSERT INTO {table} VALUES ('k')")
                await fx.publish(Captured(n=1))

        return fx, call

    fx, call = make()
    with pytest.raises(RuntimeError, match="broker down"):
        await run_once(fx, call, Sent(fail=True), lease=30)
    assert await rows() == 0  # rolled back with the failed send
    assert await key_state(pg, store) is None  # released: the retry runs
    sent = Sent()
    fx, call = make()
    assert await run_once(fx, call, sent, lease=30) == RAN
    assert await rows() == 1 and [len(b) for b in sent.batches] == [1]
    assert await key_state(pg, store) == "done"


async def test_a_step_after_the_transaction_block_that_fails_rolls_the_block_back(
    make_pg_store, pg, rows_table
) -> None:
    table, rows = rows_table
    store = make_pg_store()
    fx = effects_for(store)

    async def call():
        async with fx.transaction() as conn:
            await conn.execute(f"INSERT INTO {table} VALUES ('k')")
        assert await rows() == 0  # not committed yet: the handler has not returned
        raise RuntimeError("the step after the block failed")

    with pytest.raises(RuntimeError, match="after the block"):
        await run_once(fx, call, Sent(), lease=30)
    assert await rows() == 0
    assert await key_state(pg, store) is None


async def test_a_failed_block_the_handler_survives_drops_its_follow_ups_and_marks_done(
    make_pg_store, pg, rows_table
) -> None:
    table, rows = rows_table
    store = make_pg_store()
    fx = effects_for(store)

    async def call():
        await fx.publish(Captured(n=0))
        with contextlib.suppress(RuntimeError):
            async with fx.transaction() as conn:
                await conn.execute(f"INSERT INTO {table} VALUES ('k')")
                await fx.publish(Captured(n=1))
                raise RuntimeError("the block failed")

    sent = Sent()
    assert await run_once(fx, call, sent, lease=30) == RAN
    assert await rows() == 0
    assert [[f.message.n for f in b] for b in sent.batches] == [[0]]
    assert await key_state(pg, store) == "done"


async def test_with_an_outbox_follow_ups_published_after_the_block_join_the_transaction(
    make_pg_store, make_outbox, pg, rows_table
) -> None:
    from rabbitq import App

    table, rows = rows_table
    outbox = make_outbox(App(queue="q.unused", exchange="x.unused"))
    store = make_pg_store()
    fx = effects_for(store, outbox=outbox)

    async def call():
        async with fx.transaction() as conn:
            await conn.execute(f"INSERT INTO {table} VALUES ('k')")
        await fx.publish(Captured(n=2))  # after the block: still in the transaction

    sent = Sent()
    assert await run_once(fx, call, sent, lease=30) == RAN
    assert sent.batches == [] and (await outbox.stats())[0] == 1
    assert await rows() == 1 and await key_state(pg, store) == "done"
