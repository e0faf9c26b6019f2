"""Fixtures for the unique and debounce tests: a backend of this test's own in the
machine's PostgreSQL or Redis (each test runs against both), dropped after."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from rabbitq import App, Message
from rabbitq.backends import Backend, PostgresBackend, RedisBackend
from tests.effects.conftest import PG_URL, drop_tables
from tests.helpers import REDIS_URL, redis_key_prefix, service_fixture


@pytest.fixture(params=["postgres", "redis"])
@service_fixture
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """A PostgresBackend with a table prefix, or a RedisBackend with a key base, of this
    test's own."""
    if request.param == "postgres":
        prefix = f"t_{uuid.uuid4().hex[:10]}_"
        yield PostgresBackend(PG_URL, prefix=prefix, cleanup_interval=None)
        await drop_tables(prefix)
    else:
        async with redis_key_prefix() as base:
            yield RedisBackend(REDIS_URL, key_prefix=base)


@pytest.fixture
async def make_keyed(make_app, backend) -> AsyncIterator[Callable[..., App]]:
    """``make_keyed(**kwargs)``: ``make_app`` with this test's backend (a no-op handler of
    :class:`Capture` unless ``handler=False``); its stores closed after the test."""
    made: list[App] = []

    def factory(*, handler: bool = True, **kwargs: Any) -> App:
        app: App = make_app(backend=backend, **kwargs)
        if handler:
            app.handler(Capture)(_noop)
        made.append(app)
        return app

    yield factory
    for app in made:
        await close_stores(app)


async def close_stores(app: App) -> None:
    """Close the key store, the status store and the idempotency store of ``app``."""
    await app.tracing.flush()
    for step in app.publish_steps:
        await step.store.close()  # type: ignore[attr-defined]
    if app.status_writer is not None:
        await app.status_writer.store.close()
    if app.idempotency is not None:
        await app.idempotency.close()


class Capture(Message, type="test.unique.capture"):
    order_id: int
    producer: int = 0


async def _noop(msg: Capture) -> None:
    pass
