"""The idempotency store protocol, against the real PostgreSQL and Redis."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from rabbitq.effects import StoreUnavailable, redisstore
from rabbitq.effects.store import BUSY, DONE, LEASE_MARGIN, NEW, Claim, lease_for
from rabbitq.errors import ConfigurationError


def test_the_lease_outlasts_the_handler_timeout() -> None:
    assert lease_for(30) == 30 + LEASE_MARGIN
    assert lease_for(None, default=100) == 100 + LEASE_MARGIN


async def test_a_new_key_is_claimed_then_busy_then_done(make_store) -> None:
    store = make_store()
    first = await store.claim("k1", lease=30)
    assert first.status is NEW
    assert (await store.claim("k1", lease=30)).status is BUSY
    assert await store.done(first)
    assert (await store.claim("k1", lease=30)).status is DONE


async def test_a_released_key_runs_again(make_store) -> None:
    store = make_store()
    claim = await store.claim("k", lease=30)
    await store.release(claim)
    assert (await store.claim("k", lease=30)).status is NEW


async def test_an_expired_lease_lets_a_redelivery_run_and_the_old_holder_cannot_settle(
    make_store,
) -> None:
    store = make_store()
    dead = await store.claim("k", lease=0.2)
    await asyncio.sleep(0.4)
    alive = await store.claim("k", lease=30)
    assert alive.status is NEW
    assert not await store.done(dead)  # the lease was lost: no overwrite
    await store.release(alive)
    assert (await store.claim("k", lease=30)).status is NEW


async def test_a_released_old_claim_does_not_free_the_new_holders_key(make_store) -> None:
    store = make_store()
    dead = await store.claim("k", lease=0.2)
    await asyncio.sleep(0.4)
    alive = await store.claim("k", lease=30)
    await store.release(dead)
    assert (await store.claim("k", lease=30)).status is BUSY
    assert await store.done(alive)


async def test_a_done_key_is_forgotten_after_the_retention(make_store) -> None:
    store = make_store(retention=1.5)  # more than a few round trips
    claim = await store.claim("k", lease=30)
    await store.done(claim)
    assert (await store.claim("k", lease=30)).status is DONE
    await asyncio.sleep(1.7)
    assert (await store.claim("k", lease=30)).status is NEW


async def test_fifty_concurrent_claims_of_one_key_give_exactly_one_new(make_store) -> None:
    stores = [make_store() for _ in range(5)]  # five "workers", each its own connections
    claims = await asyncio.gather(*(stores[i % 5].claim("same", lease=30) for i in range(50)))
    assert sum(c.status is NEW for c in claims) == 1
    assert sum(c.status is BUSY for c in claims) == 49


async def test_an_unreachable_postgres_is_an_error_not_a_pass(make_pg_store) -> None:
    store = make_pg_store(dsn="postgresql://postgres@127.0.0.1:1/test", timeout=1)
    with pytest.raises(StoreUnavailable):
        await store.claim("k", lease=30)


async def test_an_unreachable_redis_is_an_error_not_a_pass(make_redis_store) -> None:
    store = make_redis_store(url="redis://127.0.0.1:1/0", timeout=1)
    with pytest.raises(StoreUnavailable):
        await store.claim("k", lease=30)
    with pytest.raises(StoreUnavailable):
        await store.open()


async def test_postgres_connections_cut_by_the_server_are_replaced(make_pg_store, pg) -> None:
    store = make_pg_store()
    await store.claim("before", lease=30)
    cur = await pg.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE pid <> pg_backend_pid() AND datname = 'test' AND query LIKE %s",
        ("%" + store.sql.table + "%",),
    )
    assert any(r[0] for r in await cur.fetchall())  # the store's connection was cut
    # The next claim either works on a fresh connection or fails loudly; never a pass.
    outcomes = []
    for key in ("a", "b", "c"):
        try:
            outcomes.append((await store.claim(key, lease=30)).status)
        except StoreUnavailable:
            outcomes.append("error")
    assert outcomes[-1] is NEW
    assert all(o in (NEW, "error") for o in outcomes)


async def test_postgres_creates_its_table_on_first_use_and_cleans_expired_keys(
    make_pg_store, pg
) -> None:
    store = make_pg_store(retention=0.1)
    for i in range(5):
        claim = await store.claim(f"old{i}", lease=30)
        await store.done(claim)
    live = await store.claim("live", lease=30)
    await asyncio.sleep(0.3)
    assert await store.cleanup() == 5
    cur = await pg.execute(f"SELECT key FROM {store.sql.table}")
    assert [r[0] for r in await cur.fetchall()] == ["live"]
    assert live.status is NEW


async def test_postgres_cleanup_reads_expired_keys_through_the_index(make_pg_store, pg) -> None:
    store = make_pg_store()
    await store.open()
    await pg.execute("SET enable_seqscan = off")  # a tiny table is scanned otherwise
    cur = await pg.execute(
        f"EXPLAIN SELECT key FROM {store.sql.table} WHERE expires_at < now()"
        " ORDER BY expires_at LIMIT 1000"
    )
    plan = "\n".join(r[0] for r in await cur.fetchall())
    assert f"{store.sql.table}_expires" in plan


def _count_pipelines(store) -> list[int]:
    """The number of calls in each pipeline ``store`` sends from now on."""
    sizes: list[int] = []
    send = store._ops._flush

    async def counting(batch):
        sizes.append(len(batch))
        return await send(batch)

    store._ops._flush = counting
    return sizes


async def test_redis_sends_the_calls_of_concurrent_handlers_in_one_pipeline(
    make_redis_store,
) -> None:
    store = make_redis_store()
    await store.open()
    sizes = _count_pipelines(store)
    claims = await asyncio.gather(*(store.claim(f"k{i}", lease=30) for i in range(100)))
    assert [c.status for c in claims] == [NEW] * 100
    assert await asyncio.gather(*(store.done(c) for c in claims)) == [True] * 100
    again = await asyncio.gather(*(store.claim(f"k{i}", lease=30) for i in range(100)))
    assert [c.status for c in again] == [DONE] * 100
    # One round trip per step, not one or two per call: the calls issued in one turn of
    # the event loop go together, as one script call (the claims of done keys included).
    assert sizes == [100, 100, 100]


async def test_redis_a_key_error_is_its_callers_alone(make_redis_store, redis_url) -> None:
    store = make_redis_store()
    raw = aioredis.Redis.from_url(redis_url)
    try:
        await raw.hset(store.key_prefix + "odd", "f", "v")  # GET fails: WRONGTYPE
    finally:
        await raw.aclose()
    sizes = _count_pipelines(store)
    odd, fine = await asyncio.gather(
        store.claim("odd", lease=30), store.claim("fine", lease=30), return_exceptions=True
    )
    assert isinstance(odd, StoreUnavailable) and "WRONGTYPE" in str(odd)
    assert fine.status is NEW
    assert sizes == [2]  # both in one script call


async def test_redis_a_failed_pipeline_fails_every_call_in_it(make_redis_store) -> None:
    store = make_redis_store(url="redis://127.0.0.1:1/0", timeout=1)
    sizes = _count_pipelines(store)
    outcomes = await asyncio.gather(
        *(store.claim(f"k{i}", lease=30) for i in range(10)), return_exceptions=True
    )
    assert all(isinstance(o, StoreUnavailable) for o in outcomes), outcomes
    assert sizes == [10]


async def test_redis_close_sends_and_answers_the_calls_already_issued(
    make_redis_store,
) -> None:
    store, other = make_redis_store(), make_redis_store()
    tasks = [asyncio.create_task(store.claim(f"k{i}", lease=30)) for i in range(20)]
    await asyncio.sleep(0)  # each has issued its claim; none is sent yet
    assert store._ops.pending == 20
    await store.close()
    assert all(t.done() for t in tasks)
    assert [t.result().status for t in tasks] == [NEW] * 20
    assert store._client is None
    claims = [await other.claim(f"k{i}", lease=30) for i in range(20)]
    assert [c.status for c in claims] == [BUSY] * 20


async def test_redis_a_claim_finding_its_own_token_holds_the_lease(
    make_redis_store, redis_url, monkeypatch
) -> None:
    # redis-py retries a pipeline after a connection error: a SET NX applied before the
    # error then finds the key taken, by this very claim.
    store = make_redis_store()
    monkeypatch.setattr(redisstore, "Claim", lambda key, status: Claim(key, status, token="t1"))
    raw = aioredis.Redis.from_url(redis_url)
    try:
        await raw.set(store.key_prefix + "k", b"busy:t1", px=30_000)
    finally:
        await raw.aclose()
    claim = await store.claim("k", lease=30)
    assert claim.status is NEW
    assert await store.done(claim)


def test_redis_pool_size_must_be_a_positive_integer() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigurationError):
            redisstore.RedisStore(pool_size=bad)


async def test_postgres_batch_statements_sent_twice_answer_the_same(make_pg_store) -> None:
    # What a Lane does after a cut: the statement may have committed before it.
    store = make_pg_store()
    claim = Claim("k", NEW)
    assert await store._claim_batch([(claim, 30)]) == [NEW]
    assert await store._claim_batch([(claim, 30)]) == [NEW]  # its own token: still its lease
    assert await store._done_batch([claim]) == [True]
    assert await store._done_batch([claim]) == [True]  # its own done row
    assert await store._release_batch([claim]) == [None]  # a done key is never released
    assert (await store.claim("k", lease=30)).status is DONE


async def test_postgres_claims_cut_mid_stream_are_sent_again_on_a_new_connection(
    make_pg_store, pg
) -> None:
    store = make_pg_store()
    first = await store.claim("a", lease=30)
    await pg.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE pid <> pg_backend_pid() AND datname = 'test' AND query LIKE %s",
        ("%" + store.sql.table + "%",),
    )
    # The claims' connection was cut while idle: the next batch goes on a new one.
    claims = await asyncio.gather(*(store.claim(k, lease=30) for k in ("a", "b", "c")))
    assert [c.status for c in claims] == [BUSY, NEW, NEW]
    assert await store.done(first)
