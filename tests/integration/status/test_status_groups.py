"""A workflow group's status in the real PostgreSQL and Redis: a worker records each
member with its group (through a retry, a dead letter and a replay) and the callback
apart, ``app.status(group_id)`` counts members by state; a store reads at most
``limit`` members and says how many it holds; an older PostgreSQL table gains the column
and the indexes in place."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from rabbitq import Context, Message, PermanentError, RetryPolicy, Worker, dlq
from rabbitq._amqp.headers import CALLBACK_OF, GROUP
from rabbitq.status import GroupStatus, MessageStatus, PostgresStatus, RedisStatus
from rabbitq.status.lookup import group_status
from rabbitq.status.model import (
    DEAD_LETTERED,
    PUBLISHED,
    PURGED,
    RECEIVED,
    REPLAYED,
    RETRYING,
    STARTED,
    SUCCEEDED,
    Record,
)
from tests.helpers import REDIS_URL, Recorder, running, wait_for

pytestmark = [pytest.mark.broker]

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


class Step(Message, type="test.status.group.step"):
    kind: str


@pytest.fixture(params=["redis", "postgres"])
async def store(request, redis_prefix) -> AsyncIterator[PostgresStatus | RedisStatus]:
    made: PostgresStatus | RedisStatus
    if request.param == "postgres":
        made = PostgresStatus(PG_URL, prefix=f"t_{uuid.uuid4().hex[:8]}_", cleanup_interval=None)
    else:
        made = RedisStatus(REDIS_URL, key_prefix=redis_prefix + "status:")
    yield made
    await made.drop()
    await made.close()


async def test_a_worker_records_members_and_callback_and_status_counts_them(
    store, make_app, broker_url
):
    app = make_app(status=store, retry=RetryPolicy(delays=(0.2,)))
    gid = uuid.uuid4().hex
    replayed = False
    failed: set[str] = set()

    @app.handler(Step)
    async def step(msg: Step, ctx: Context) -> None:
        if msg.kind == "flaky" and ctx.message_id not in failed:
            failed.add(ctx.message_id)
            raise OSError("gateway down")
        if msg.kind == "broken" and not replayed:
            raise PermanentError("declined")

    recorder = Recorder()
    async with running(Worker(app, hooks=recorder)):
        async with app.publisher() as pub:
            kinds = ("ok", "flaky", "broken")
            members = {k: await pub.publish(Step(kind=k), headers={GROUP: gid}) for k in kinds}
            callback = await pub.publish(Step(kind="ok"), headers={CALLBACK_OF: gid})
            await pub.publish(Step(kind="ok"))  # not of the group
        await wait_for(lambda: recorder.count("succeeded") == 4, timeout=30)
        await wait_for(lambda: recorder.count("dead_lettered") == 1, timeout=30)
        await app.tracing.flush()
        group = await app.status(gid)
        assert isinstance(group, GroupStatus), group
        assert group.total == 3 and dict(group.counts) == {SUCCEEDED: 2, DEAD_LETTERED: 1}
        assert not group.complete and group.members[0].message_id == members["broken"]
        assert [(c.message_id, c.state) for c in group.callbacks] == [(callback, SUCCEEDED)]
        replayed = True
        tally = await dlq.replay(app.queue, url=broker_url, tracing=app.tracing)
        assert tally.done == 1
        await wait_for(lambda: recorder.count("succeeded") == 5, timeout=30)
    group = await app.status(gid)
    assert isinstance(group, GroupStatus) and group.complete, group
    assert dict(group.counts) == {SUCCEEDED: 3}
    for kind, mid in members.items():  # every record of a member carries the group
        records = await store.read(mid)
        assert {r.group_id for r in records} == {gid}, kind
    flaky, broken = [await app.status(members[k]) for k in ("flaky", "broken")]
    assert isinstance(flaky, MessageStatus) and flaky.group_id == gid
    assert RETRYING in [e.state for e in flaky.history]
    assert isinstance(broken, MessageStatus)
    assert [e.state for e in broken.history][-5:] == [
        DEAD_LETTERED, REPLAYED, RECEIVED, STARTED, SUCCEEDED,
    ]  # fmt: skip


async def test_a_store_reads_at_most_limit_members_and_counts_them_all(store):
    gid = uuid.uuid4().hex
    records = [Record(f"{gid}-{i:02}", SUCCEEDED, 10.0 + i, 1, {}, gid) for i in range(12)]
    records.append(Record(f"{gid}-00", PURGED, 99.0, None, {"queue": "q.dlq"}))  # no group
    records.append(Record(f"{gid}-cb", PUBLISHED, 50.0, None, {"type": "t"}, None, gid))
    records.append(Record("other", SUCCEEDED, 10.0, 1, {}, "another-group"))
    await store.write(records)
    everything = await store.read_group(gid, 100)
    assert everything.total == 12
    assert {r.message_id for r in everything.records} == {f"{gid}-{i:02}" for i in range(12)} | {
        f"{gid}-cb"
    }
    assert len(everything.records) == 14  # the purge and the callback included
    bounded = await group_status(store, gid, limit=5)
    assert bounded is not None
    assert bounded.total == 12 and len(bounded.members) == 5 and bounded.more == 7
    assert sum(bounded.counts.values()) == 5 and len(bounded.callbacks) == 1
    assert await group_status(store, "no-such-group", limit=5) is None
    assert (await store.read(f"{gid}-cb"))[0].callback_of == gid


async def test_redis_keeps_a_group_index_as_long_as_the_records(redis_prefix):
    store = RedisStatus(REDIS_URL, key_prefix=redis_prefix + "status:", retention=60)
    gid = uuid.uuid4().hex
    await store.write([Record("m1", SUCCEEDED, 1.0, 1, {}, gid)])
    client = store._redis()
    ttl = await client.pttl(redis_prefix + f"status-group:{gid}")
    assert 0 < ttl <= 60_000 and await client.pttl(redis_prefix + "status:m1") > 0
    assert await store.drop() == 2
    await store.close()


async def test_an_older_postgres_table_gains_the_column_and_indexes_in_place():
    table = f"t_{uuid.uuid4().hex[:8]}_status"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(
            f'CREATE TABLE "{table}" (id bigserial PRIMARY KEY, message_id text NOT NULL,'
            " state text NOT NULL, at timestamptz NOT NULL, attempt integer, detail jsonb,"
            " group_id text, expires_at timestamptz NOT NULL)"
        )
        conn.execute(
            f'INSERT INTO "{table}" (message_id, state, at, expires_at)'
            " VALUES ('old', 'succeeded', now(), now() + interval '1 hour')"
        )
    store = PostgresStatus(PG_URL, prefix=table.removesuffix("status"), cleanup_interval=None)
    try:
        await store.write([Record("new", SUCCEEDED, 1.0, 1, {}, "g", None)])
        assert [r.state for r in await store.read("old")] == [SUCCEEDED]
        assert (await store.read_group("g", 10)).total == 1
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            indexes = {
                name
                for (name,) in conn.execute(
                    "SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,)
                )
            }
        assert {f"{table}_group", f"{table}_callback"} <= indexes
    finally:
        await store.drop()
