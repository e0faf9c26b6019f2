"""A store that cannot be reached says why in its one line: the database that does not
exist, the port that refuses, rather than the pool's "couldn't get a connection after
5.00 sec" (the reason was only in the pool's warnings); through the API and the CLI.
A pool that is only busy says that instead."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq.effects import StoreUnavailable
from rabbitq.effects.database import Database, one_line
from tests.backends import store_errors_app as apps
from tests.effects.conftest import PG_URL
from tests.helpers import assert_one_line_error, run_cli_async

pytestmark = pytest.mark.services
APP = "tests.backends.store_errors_app"
NO_DB = 'database "rabbitq_no_such_db" does not exist'
REFUSED = "127.0.0.1:1"  # redis-py: "Error 111 connecting to 127.0.0.1:1. Connect call failed"


def said(exc: pytest.ExceptionInfo[StoreUnavailable]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


async def test_a_missing_database_is_named_by_the_status_and_cancel_calls() -> None:
    app = apps.missing_db
    with pytest.raises(StoreUnavailable) as status:
        await app.status("some-id")
    assert NO_DB in said(status) and "couldn't get a connection" not in said(status)
    with pytest.raises(StoreUnavailable) as cancel:
        await app.cancel("some-id")
    assert NO_DB in said(cancel)
    with pytest.raises(StoreUnavailable) as opened:
        await app.idempotency.open()  # type: ignore[union-attr]
    assert NO_DB in said(opened)


async def test_a_refused_redis_port_is_named_by_the_status_and_cancel_calls() -> None:
    app = apps.wrong_port
    with pytest.raises(StoreUnavailable) as status:
        await app.status("some-id")
    assert REFUSED in said(status) and "Connect call failed" in said(status)
    with pytest.raises(StoreUnavailable) as cancel:
        await app.cancel("some-id")
    assert REFUSED in said(cancel)


async def test_a_busy_pool_says_it_was_busy() -> None:
    db = Database(PG_URL, schema=[], schema_name="t_busy_pool", pool_size=1, timeout=1.0)
    try:
        async with db.connection():
            with pytest.raises(StoreUnavailable) as busy:
                async with db.connection():
                    pass
        assert "all 1 connections of its pool were busy for 1s" in said(busy)
        async with db.connection() as conn:  # free again: served
            await conn.execute("SELECT 1")
    finally:
        await db.close()


async def test_waiting_callers_keep_a_pool_closed_under_them() -> None:
    db = Database(PG_URL, schema=[], schema_name="t_close_under", pool_size=1, timeout=5.0)

    async def read() -> int:
        async with db.connection() as conn:
            cur = await conn.execute("SELECT 1, pg_sleep(0.01)")
            row = await cur.fetchone()
            assert row is not None
            return int(row[0])

    async def close_often() -> None:
        for _ in range(20):
            await db.close()
            await asyncio.sleep(0.005)

    try:
        results = await asyncio.gather(*(read() for _ in range(50)), close_often())
    finally:
        await db.close()
    assert results[:50] == [1] * 50


def test_one_line_joins_the_lines_of_each_address_tried() -> None:
    text = 'connection failed: at "::1" failed: refused\n\tIs it running?\nat "127.0.0.1" failed'
    assert one_line(text) == (
        'connection failed: at "::1" failed: refused; Is it running?; at "127.0.0.1" failed'
    )


@pytest.mark.parametrize(
    ("command", "app", "cause"),
    [
        ("status", "missing_db", NO_DB),
        ("cancel", "missing_db", NO_DB),
        ("status", "wrong_port", REFUSED),
        ("cancel", "wrong_port", REFUSED),
    ],
)
async def test_the_cli_says_the_cause_in_its_one_error_line(
    command: str, app: str, cause: str
) -> None:
    result = await run_cli_async(command, f"{APP}:{app}", "some-id")
    line = assert_one_line_error(result)
    assert cause in line, line
