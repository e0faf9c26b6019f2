"""The status of messages through a real worker, publisher and DLQ tools, with the
PostgreSQL and the Redis store: success, a retry, a duplicate, a dead letter replayed
into success, and a dead letter purged, each read back with ``app.status()``."""

from __future__ import annotations

import os
import uuid

import pytest

from rabbitq import Context, Message, PermanentError, RetryPolicy, Worker, dlq
from rabbitq.effects import PostgresStore, RedisStore
from rabbitq.status import PostgresStatus, RedisStatus
from rabbitq.status.backend import status_store
from tests.helpers import REDIS_URL, Recorder, running, wait_for

pytestmark = [pytest.mark.broker]

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


class Job(Message, type="test.status.job"):
    kind: str


def _store(kind: str, prefix: str) -> PostgresStore | RedisStore:
    if kind == "postgres":
        return PostgresStore(PG_URL, prefix=prefix.replace(":", "_"), cleanup_interval=None)
    return RedisStore(REDIS_URL, key_prefix=prefix)


def test_an_idempotency_store_makes_its_status_companion():
    pg = status_store(PostgresStore(PG_URL, prefix="svc_", retention=60))
    assert isinstance(pg, PostgresStatus) and pg.sql.table == "svc_status"
    assert pg.retention == 60
    rs = status_store(RedisStore(REDIS_URL, retention=60, timeout=2.5))
    assert isinstance(rs, RedisStatus) and rs.key_prefix == "rabbitq:status:"
    assert rs.retention_ms == 60_000 and rs.timeout == 2.5


@pytest.mark.parametrize("kind", ["redis", "postgres"])
async def test_each_message_has_its_life_recorded(kind, make_app, broker_url, redis_prefix, caplog):
    prefix = f"t_{uuid.uuid4().hex[:8]}_" if kind == "postgres" else redis_prefix
    store = _store(kind, prefix)
    app = make_app(retry=RetryPolicy(delays=(0.2,)), idempotency=store, status=store)
    replayed = False
    failed_once: set[str] = set()

    @app.handler(Job)
    async def job(msg: Job, ctx: Context) -> None:
        if msg.kind == "flaky" and ctx.message_id not in failed_once:
            failed_once.add(ctx.message_id)
            raise OSError("gateway down")
        if msg.kind == "broken" and not replayed:
            raise OSError("still down")
        if msg.kind == "poison":
            raise PermanentError("bad card")

    recorder = Recorder()
    try:
        async with running(Worker(app, hooks=recorder)):
            async with app.publisher() as pub:
                kinds = ("ok", "flaky", "broken", "poison")
                ids = {k: await pub.publish(Job(kind=k)) for k in kinds}
                await pub.publish(Job(kind="ok"), message_id=ids["ok"])  # a duplicate
            await wait_for(lambda: recorder.count("dead_lettered") == 2, timeout=30)
            await wait_for(lambda: recorder.count("succeeded") == 3, timeout=30)
            replayed = True
            tally = await dlq.replay(
                app.queue, url=broker_url, tracing=app.tracing,
                filters=dlq.Filters(message_ids=frozenset({ids["broken"]})),
            )  # fmt: skip
            assert tally.done == 1
            await wait_for(lambda: recorder.count("succeeded") == 4, timeout=30)
            purged = await dlq.purge(app.queue, url=broker_url, tracing=app.tracing)
            assert purged.done == 1
        states = {}
        for k, mid in ids.items():
            st = await app.status(mid)
            assert st is not None, k
            states[k] = [e.state for e in st.history]
        # the copy may be published before the original is handled: the same records
        assert sorted(states["ok"]) == sorted([
            "published", "received", "started", "succeeded",
            "published", "received", "started", "duplicate",
        ])  # fmt: skip
        assert states["ok"][-1] == "duplicate"
        assert states["flaky"] == [
            "published", "received", "started", "retrying",
            "received", "started", "succeeded",
        ]  # fmt: skip
        assert states["broken"] == [
            "published", "received", "started", "retrying",
            "received", "started", "dead_lettered",
            "replayed", "received", "started", "succeeded",
        ]  # fmt: skip
        assert states["poison"] == [
            "published", "received", "started", "dead_lettered", "purged",
        ]  # fmt: skip
        flaky = await app.status(ids["flaky"])
        assert flaky is not None and flaky.attempts == 2 and flaky.state == "succeeded"
        retry = flaky.history[3]
        assert retry.attempt == 1 and retry.detail["delay"] == "200ms"
        assert retry.detail["next_attempt"] == 2 and "gateway down" in retry.detail["error"]
        assert retry.detail["next_at"] >= retry.at.timestamp()
        poison = await app.status(ids["poison"])
        assert poison is not None and poison.history[3].detail["reason"] == "permanent"
        assert "duration" in flaky.history[-1].detail
        assert await app.status("no-such-id") is None
        assert app.status_writer is not None
        lost = [r.getMessage() for r in caplog.records if r.name == "rabbitq.status"]
        assert app.status_writer.counts["failed"] == app.status_writer.counts["dropped"] == 0, lost
    finally:
        assert app.status_writer is not None
        status = app.status_writer.store
        if isinstance(status, PostgresStatus):
            await status.drop()
            assert isinstance(store, PostgresStore)
            await store.drop()
            await store.close()
        else:
            await status.close()
