"""A backend-built app against the machine's real PostgreSQL and Redis
(``$RABBITQ_TEST_PG``, ``$RABBITQ_TEST_REDIS``, as in tests/effects): its handler runs
once per key, a delivery's life is recorded and read back, and the chord store beside
the status store keeps a result. Each test has its own prefix and drops what it made."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from rabbitq import App, Message
from rabbitq.backends import Backend, PostgresBackend, RedisBackend
from rabbitq.status import MessageStatus
from rabbitq.testing import deliver
from rabbitq.workflow.chords import chord_store
from tests.effects.conftest import PG_URL, REDIS_URL, drop_tables

pytestmark = pytest.mark.services  # the real PostgreSQL and Redis


class Pay(Message, type="test.backends.pay"):
    payment_id: str


@pytest.fixture(params=["postgres", "redis"])
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
    await made.chords().close()
    if isinstance(made, PostgresBackend):
        await drop_tables(made.location.prefix)
    else:
        client = aioredis.Redis.from_url(REDIS_URL)
        async for name in client.scan_iter(match=made.location.base + "*", count=1000):
            await client.delete(name)
        await client.aclose()


async def test_a_backend_app_runs_a_handler_once_per_key(backend: Backend) -> None:
    app = App(queue="q", backend=backend)
    paid: list[str] = []

    @app.handler(Pay, key=lambda m: m.payment_id)
    async def pay(msg: Pay) -> None:
        paid.append(msg.payment_id)

    first = await deliver(app, Pay(payment_id="p1"))
    again = await deliver(app, Pay(payment_id="p1"))
    other = await deliver(app, Pay(payment_id="p2"))
    assert first.acked and not first.duplicate
    assert again.acked and again.duplicate
    assert other.acked and not other.duplicate
    assert paid == ["p1", "p2"]


async def test_a_backend_app_records_status_and_keeps_results(backend: Backend) -> None:
    app = App(queue="q", backend=backend)
    assert app.status_writer is not None
    span = app.tracing.deliver(
        {}, queue="q", type_name=Pay.type_name(), routing_key=Pay.type_name(),
        message_id="m1", correlation_id=None, attempt=1, body_size=3,
    )  # fmt: skip
    with span.activate():
        pass
    span.end("success")
    await app.status_writer.flush()
    found = await app.status("m1")
    assert isinstance(found, MessageStatus) and found.state == "succeeded"

    chords = chord_store(app.status_writer.store)  # as the worker finds it
    assert chords is not None
    await chords.put_result("m1", b'{"ok": true}')
    assert await backend.chords().result("m1") == {"ok": True}
    assert await app.result("m1") == {"ok": True}
    await chords.close()
