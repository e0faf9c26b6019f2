"""Concurrency beyond a store's pool queues, it does not fail: 300 unique publishes, 300
debounced publishes and 300 ``app.cancel`` calls at once in one process, with the Redis
and with the PostgreSQL backend (the shared services, prefixes of the test's own).

Before: on Redis 200 of each 300 raised ``StoreUnavailable: ... Too many connections``
(redis-py's pool of 100 refuses the 101st caller); on PostgreSQL a cancel's status read
came back ``no-status``."""

from __future__ import annotations

import asyncio
import collections
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from rabbitq import App, Message
from rabbitq.backends import Backend, PostgresBackend, RedisBackend
from rabbitq.cancellation import model
from rabbitq.cancellation.cancel import can_cancel, stage_of
from tests.effects.conftest import PG_URL, REDIS_URL, drop_tables
from tests.helpers import declare_topology, drain_queue, queue_depth, wait_for
from tests.unique.conftest import close_stores

pytestmark = [pytest.mark.services, pytest.mark.broker, pytest.mark.timeout(300)]
CALLS = 300


class Order(Message, type="test.concurrent.order"):
    n: int


@pytest.fixture(params=["redis", "postgres"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    tag = uuid.uuid4().hex[:10]
    made: Backend
    if request.param == "postgres":
        made = PostgresBackend(PG_URL, prefix=f"t_{tag}_", cleanup_interval=None)
    else:
        made = RedisBackend(REDIS_URL, key_prefix=f"t:{tag}:")
    yield made
    await made.idempotency().close()
    await made.status().close()
    if isinstance(made, PostgresBackend):
        await drop_tables(made.location.prefix)
    else:
        client = aioredis.Redis.from_url(REDIS_URL)
        async for name in client.scan_iter(match=made.location.base + "*", count=1000):
            await client.delete(name)
        await client.aclose()


@pytest.fixture
async def make(make_app: Callable[..., App], backend: Backend) -> AsyncIterator[Callable[..., App]]:
    made: list[App] = []

    def factory(**kwargs: Any) -> App:
        app = make_app(backend=backend, queue_type="classic", **kwargs)
        app.handler(Order)(_noop)
        made.append(app)
        return app

    yield factory
    for app in made:
        await close_stores(app)
        if can_cancel(app):
            await stage_of(app).store.close()


async def _noop(msg: Order) -> None:
    pass


async def settled(calls: list[Any]) -> collections.Counter[str]:
    """Each call's fate: ``ok`` or its exception's type and first words."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    return collections.Counter(
        f"{type(r).__name__}: {str(r)[:120]}" if isinstance(r, BaseException) else "ok"
        for r in results
    )


async def test_300_unique_publishes_at_once_all_succeed(make, connection) -> None:
    app = make()
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        fates = await settled(
            [pub.publish(Order(n=i), unique_for=600, unique_key=f"k{i}") for i in range(CALLS)]
        )
    print(f"\n{CALLS} unique publishes at once: {dict(fates)}")
    assert fates == {"ok": CALLS}
    sent = await drain_queue(connection, app.queue)
    assert len(sent) == CALLS


async def test_300_debounced_publishes_at_once_all_succeed(make, connection) -> None:
    app = make(debounce=True)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        fates = await settled(
            [pub.publish(Order(n=i), debounce=1, unique_key=f"k{i}") for i in range(CALLS)]
        )
    print(f"\n{CALLS} debounced publishes at once: {dict(fates)}")
    assert fates == {"ok": CALLS}
    await wait_for(lambda: _depth_is(connection, app.queue, CALLS), timeout=60)


async def _depth_is(connection: Any, queue: str, n: int) -> bool:
    return await queue_depth(connection, queue) >= n


async def test_300_cancels_at_once_all_report_pending(make, connection) -> None:
    app = make(cancellable=True)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        ids = await asyncio.gather(*(pub.publish(Order(n=i), delay=120) for i in range(CALLS)))
    assert app.status_writer is not None
    await app.status_writer.flush()  # their "published" records are in the store
    reports = await asyncio.gather(*(app.cancel(mid) for mid in ids), return_exceptions=True)
    fates = collections.Counter(
        f"{type(r).__name__}: {r}"[:120]
        if isinstance(r, BaseException)
        else r[0].outcome + ("" if r[0].outcome == model.PENDING else f": {r[0].text[-150:]}")
        for r in reports
    )
    print(f"\n{CALLS} cancels at once: {dict(fates)}")
    assert fates == {model.PENDING: CALLS}
