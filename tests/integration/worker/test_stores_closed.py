"""A worker closes the idempotency stores it used when it stops: a store opens its pool
on first use, and a pool left open outlives the worker (in this suite its sockets were
reported as unclosed, PytestUnraisableExceptionWarning, in whichever later test the
garbage collector met them: test_accounting, after test_prometheus_live)."""

from __future__ import annotations

import uuid

from rabbitq import Context, Message, Worker
from rabbitq.effects import RedisStore
from tests.helpers import Recorder, running, wait_for


class Job(Message, type="test.stores.job"):
    n: int


class Other(Message, type="test.stores.other"):
    n: int


class CountingStore(RedisStore):
    closed = 0

    async def close(self) -> None:
        self.closed += 1
        await super().close()


async def test_a_stopped_worker_has_closed_its_idempotency_store_once(make_app):
    store = CountingStore(key_prefix=f"t:{uuid.uuid4().hex[:10]}:", retention=60)
    app = make_app(idempotency=store)

    @app.handler(Job)
    async def job(msg: Job, ctx: Context) -> None: ...

    @app.handler(Other)
    async def other(msg: Other, ctx: Context) -> None: ...

    rec = Recorder()
    async with running(Worker(app, hooks=rec)), app.publisher() as pub:
        await pub.publish(Job(n=1))
        await wait_for(lambda: rec.count("succeeded") == 1)
        assert store.closed == 0
    assert store.closed == 1  # two handlers share it: closed once
