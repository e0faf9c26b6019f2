"""PostgresStore's transactional mode: the handler's writes and the done mark commit
together, or not at all."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq.effects import LeaseLost
from rabbitq.effects.store import BUSY, DONE, NEW


async def _effects(pg, table: str) -> list[str]:
    cur = await pg.execute(f"SELECT key FROM {table} ORDER BY key")
    return [r[0] for r in await cur.fetchall()]


@pytest.fixture
async def effects_table(pg, prefix):
    table = prefix + "effects"
    await pg.execute(f"CREATE TABLE {table} (key text PRIMARY KEY)")
    return table


async def test_a_handler_that_writes_then_fails_leaves_no_row_and_no_done_mark(
    make_pg_store, pg, effects_table
) -> None:
    store = make_pg_store()
    claim = await store.claim("pay-1", lease=30)
    with pytest.raises(RuntimeError):
        async with store.transaction(claim) as conn:
            await conn.execute(f"INSERT INTO {effects_table} VALUES ('pay-1')")
            raise RuntimeError("the handler failed after its write")
    assert await _effects(pg, effects_table) == []
    assert (await store.claim("pay-1", lease=30)).status is BUSY  # not done: still leased
    await store.release(claim)

    retry = await store.claim("pay-1", lease=30)
    assert retry.status is NEW
    async with store.transaction(retry) as conn:
        await conn.execute(f"INSERT INTO {effects_table} VALUES ('pay-1')")
    assert retry.settled
    assert await _effects(pg, effects_table) == ["pay-1"]
    assert (await store.claim("pay-1", lease=30)).status is DONE


async def test_a_lost_lease_rolls_the_late_handlers_writes_back(
    make_pg_store, pg, effects_table
) -> None:
    store = make_pg_store()
    late = await store.claim("k", lease=0.2)
    await asyncio.sleep(0.4)
    winner = await store.claim("k", lease=30)
    async with store.transaction(winner) as conn:
        await conn.execute(f"INSERT INTO {effects_table} VALUES ('winner')")
    with pytest.raises(LeaseLost):
        async with store.transaction(late) as conn:
            await conn.execute(f"INSERT INTO {effects_table} VALUES ('late')")
    assert await _effects(pg, effects_table) == ["winner"]


async def test_two_workers_in_transactional_mode_on_one_key_make_one_effect(
    make_pg_store, pg, effects_table
) -> None:
    stores = [make_pg_store(), make_pg_store()]

    async def handle(store) -> str:
        claim = await store.claim("same", lease=30)
        if claim.status is not NEW:
            return claim.status.value
        async with store.transaction(claim) as conn:
            await asyncio.sleep(0.05)
            await conn.execute(f"INSERT INTO {effects_table} VALUES ('same')")
        return "ran"

    results = await asyncio.gather(*(handle(stores[i % 2]) for i in range(10)))
    assert results.count("ran") == 1
    assert await _effects(pg, effects_table) == ["same"]


async def test_keys_with_quotes_and_dollars_are_marked_done_as_written(
    make_pg_store, pg, effects_table
) -> None:
    # The done mark rides with COMMIT in one simple query, its values quoted as literals.
    store = make_pg_store()
    for key in ("it's", "a'; DROP TABLE x; --", "$$ $q$ \\ %s %(key)s", "ünï\tcode"):
        claim = await store.claim(key, lease=30)
        async with store.transaction(claim) as conn:
            await conn.execute(f"INSERT INTO {effects_table} VALUES (%s)", (key,))
        assert claim.settled
        assert (await store.claim(key, lease=30)).status is DONE
    assert len(await _effects(pg, effects_table)) == 4


async def test_the_connection_goes_back_to_the_pool_outside_any_transaction(
    make_pg_store, effects_table
) -> None:
    store = make_pg_store()
    ok, failing = await store.claim("ok", lease=30), await store.claim("failing", lease=30)
    async with store.transaction(ok) as conn:
        await conn.execute(f"INSERT INTO {effects_table} VALUES ('ok')")
    with pytest.raises(RuntimeError):
        async with store.transaction(failing) as conn:
            await conn.execute(f"INSERT INTO {effects_table} VALUES ('failing')")
            raise RuntimeError("boom")
    async with store.db.connection() as conn:  # (pool_size connections: any of them)
        assert conn.info.transaction_status.name == "IDLE"
    await store.release(failing)


async def test_a_block_that_commits_itself_is_named_and_its_key_still_marked_done(
    make_pg_store, pg, effects_table, caplog
) -> None:
    # BEGIN is rabbitq's own statement now, so psycopg no longer refuses the block's
    # commit: the worker says so (its writes committed before the done mark).
    store = make_pg_store()
    claim = await store.claim("self-commit", lease=30)
    async with store.transaction(claim) as conn:
        await conn.execute(f"INSERT INTO {effects_table} VALUES ('self-commit')")
        await conn.commit()
    assert "ended inside ctx.transaction()" in caplog.text
    assert await _effects(pg, effects_table) == ["self-commit"]
    assert (await store.claim("self-commit", lease=30)).status is DONE
