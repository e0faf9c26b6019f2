"""Fixtures for the effects tests: the machine's real PostgreSQL and Redis.

``$RABBITQ_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``) and
``$RABBITQ_TEST_REDIS`` (default ``redis://127.0.0.1:6379/0``). Without them the tests
fail (``.ci/run`` starts both): a store check is never skipped. Every test gets its own
table prefix and key prefix and drops them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aio_pika
import psycopg
import pytest
import redis.asyncio as aioredis

from rabbitq import App, Message
from rabbitq.effects import Outbox, PostgresStore, RedisStore

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("RABBITQ_TEST_REDIS", "redis://127.0.0.1:6379/0")


@pytest.fixture
def pg_url() -> str:
    return PG_URL


@pytest.fixture
def redis_url() -> str:
    return REDIS_URL


@pytest.fixture
def prefix() -> str:
    """A table prefix of this test's own."""
    return f"t_{uuid.uuid4().hex[:10]}_"


async def drop_tables(prefix: str) -> None:
    """Drop every table whose name starts with ``prefix``."""
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (prefix + "%",)
        )
        for (name,) in await cur.fetchall():
            await conn.execute(
                psycopg.sql.SQL("DROP TABLE IF EXISTS {}").format(psycopg.sql.Identifier(name))
            )


@pytest.fixture
async def pg(prefix: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A plain autocommit connection to the test database; drops this test's tables."""
    conn = await psycopg.AsyncConnection.connect(PG_URL, autocommit=True)
    try:
        yield conn
    finally:
        await conn.close()
        await drop_tables(prefix)


@pytest.fixture
async def make_pg_store(pg: Any, prefix: str) -> AsyncIterator[Callable[..., PostgresStore]]:
    made: list[PostgresStore] = []

    def factory(**kwargs: Any) -> PostgresStore:
        kwargs.setdefault("prefix", prefix)
        kwargs.setdefault("cleanup_interval", None)
        store = PostgresStore(kwargs.pop("dsn", PG_URL), **kwargs)
        made.append(store)
        return store

    yield factory
    for store in made:
        await store.close()


@pytest.fixture
async def make_redis_store() -> AsyncIterator[Callable[..., RedisStore]]:
    made: list[RedisStore] = []
    key_prefix = f"t:{uuid.uuid4().hex[:10]}:"

    def factory(**kwargs: Any) -> RedisStore:
        kwargs.setdefault("key_prefix", key_prefix)
        store = RedisStore(kwargs.pop("url", REDIS_URL), **kwargs)
        made.append(store)
        return store

    yield factory
    client = aioredis.Redis.from_url(REDIS_URL)
    async for name in client.scan_iter(match=key_prefix + "*", count=1000):
        await client.delete(name)
    await client.aclose()
    for store in made:
        await store.close()


@pytest.fixture(params=["postgres", "redis"])
def make_store(
    request: pytest.FixtureRequest,
) -> Callable[..., Any]:
    """Each store in turn (the protocol's tests run against both)."""
    name = "make_pg_store" if request.param == "postgres" else "make_redis_store"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


@pytest.fixture
async def make_outbox(pg: Any, prefix: str) -> AsyncIterator[Callable[..., Outbox]]:
    made: list[Outbox] = []

    def factory(app: Any, **kwargs: Any) -> Outbox:
        kwargs.setdefault("prefix", prefix)
        outbox = Outbox(PG_URL, app=app, **kwargs)
        made.append(outbox)
        return outbox

    yield factory
    for outbox in made:
        await outbox.close()


class Note(Message, type="outbox.note"):
    """The outbox tests' message."""

    seq: int
    key: str | None = None


@pytest.fixture
async def bound(connection, uid, broker_url):
    """An App on a fresh exchange, and a queue that receives everything published to it."""
    app = App(queue=f"t.{uid}.unused", exchange=f"t.{uid}.x", url=broker_url)
    channel = await connection.channel()
    exchange = await channel.declare_exchange(app.exchange, "topic", durable=True)
    queue = await channel.declare_queue(f"t.{uid}.sink", durable=True)
    await queue.bind(exchange, routing_key="outbox.#")
    yield app, queue
    await queue.delete(if_unused=False, if_empty=False)
    await exchange.delete()
    await channel.close()


async def received(queue) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """Every message waiting in ``queue``, taken off it."""
    out = []
    while (msg := await queue.get(fail=False, no_ack=True)) is not None:
        out.append(msg)
    return out


async def all_sent(outbox: Outbox) -> bool:
    """No row of ``outbox`` is pending."""
    return (await outbox.stats())[0] == 0
