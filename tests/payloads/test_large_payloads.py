"""Large payloads through a real broker and PostgreSQL: the body out of the broker, the
full message in the handler, the blob kept while its message waits (a retry, the DLQ)
and gone once it is handled or purged; uploads of failed publishes swept."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rabbitq import App, Message, RetryPolicy, Worker, dlq
from rabbitq.errors import Unroutable
from rabbitq.payloads import PostgresBlobs
from rabbitq.payloads.reference import BLOB, BLOB_SIZE

from ..helpers import (
    declare_topology,
    drain_queue,
    running,
    service_fixture,
    spawn_logged,
    wait_for,
)

pytestmark = pytest.mark.services

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


class Report(Message, type="payloads.report"):
    name: str
    content: str


@service_fixture
@pytest.fixture
async def blobs(uid: str) -> AsyncIterator[PostgresBlobs]:
    store = PostgresBlobs(PG_URL, above=64 * 1024, prefix=f"t{uid}_", orphan_after=0)
    yield store
    await store.close()
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        await conn.execute(f'DROP TABLE IF EXISTS "t{uid}_blobs"')


async def rows(store: PostgresBlobs) -> dict[str, tuple[str, int | None]]:
    """Every blob row: id -> (state, bytes of data held)."""
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        cur = await conn.execute(f'SELECT id, state, length(data) FROM "{store.table}"')
        return {r[0]: (r[1], r[2]) for r in await cur.fetchall()}


def big(size: int) -> str:
    """A body of ``size`` characters that does not compress away."""
    seed = uuid.uuid4().hex
    chunks, total = [], 0
    while total < size:
        chunk = hashlib.sha256(f"{seed}{total}".encode()).hexdigest()
        chunks.append(chunk)
        total += len(chunk)
    return "".join(chunks)[:size]


async def test_a_large_body_travels_as_a_reference_and_the_handler_gets_it_whole(
    make_app: Callable[..., App], blobs: PostgresBlobs, connection: Any
) -> None:
    app = make_app(large_payloads=blobs, max_body_size=None)
    got: list[tuple[str, str]] = []

    @app.handler(Report)
    async def handle(msg: Report) -> None:
        got.append((msg.name, msg.content))

    await declare_topology(connection, app)
    content = big(1024 * 1024)
    async with app.publisher() as pub:
        await pub.publish(Report(name="big", content=content))
        await pub.publish(Report(name="small", content="x"))
    waiting = await drain_queue(connection, app.queue, ack=False)
    by_size = sorted(waiting, key=lambda m: len(m.body))
    assert [len(m.body) < 200 for m in by_size] == [True, True]  # both small in the broker
    big_one = next(m for m in waiting if (m.headers or {}).get(BLOB))
    assert big_one.headers[BLOB_SIZE] > 1024 * 1024  # the JSON body's size
    assert (await rows(blobs)) == {big_one.headers[BLOB]: ("sent", big_one.headers[BLOB_SIZE])}

    async with running(Worker(app)):
        await wait_for(lambda: len(got) == 2)
        await wait_for(lambda: _states(blobs, {"done"}), timeout=30)
    assert sorted(got) == [("big", content), ("small", "x")]
    assert (await rows(blobs)) == {big_one.headers[BLOB]: ("done", None)}  # a tombstone


async def _states(store: PostgresBlobs, states: set[str]) -> bool:
    return {state for state, _ in (await rows(store)).values()} == states


async def test_50_mib_retried_dead_lettered_replayed_handled_and_its_blob_gone(
    make_app: Callable[..., App], blobs: PostgresBlobs, connection: Any
) -> None:
    """The issue's proof: a 50 MiB payload is handled, retried once, dead-lettered,
    replayed and handled, with its blob kept all along and gone at the end."""
    app = make_app(large_payloads=blobs, max_body_size=None, retry=RetryPolicy(delays=(0.5,)))
    content = big(50 * 1024 * 1024)
    attempts: list[int] = []
    fail = True

    @app.handler(Report)
    async def handle(msg: Report) -> None:
        assert msg.content == content
        attempts.append(len(msg.content))
        if fail:
            raise RuntimeError("the report service is down")

    async with running(Worker(app)):
        async with app.publisher() as pub:
            await pub.publish(Report(name="huge", content=content))
        await wait_for(lambda: dlq_holds(connection, app, 1), timeout=60)
        assert len(attempts) == 2  # the first attempt and its one retry
        [(blob_id, (state, held))] = (await rows(blobs)).items()
        assert (state, held) == ("sent", len(content) + len('{"name":"huge","content":""}'))
        fail = False
        tally = await dlq.replay(app.queue, url=app.url)
        assert tally.done == 1
        await wait_for(lambda: len(attempts) == 3, timeout=60)
        await wait_for(lambda: _states(blobs, {"done"}), timeout=30)
    assert (await rows(blobs)) == {blob_id: ("done", None)}
    assert (await blobs.sweep()).tombstones == 0  # kept a day: a lost ack reads "handled"


async def dlq_holds(connection: Any, app: App, count: int) -> bool:
    channel = await connection.channel()
    try:
        queue = await channel.declare_queue(f"{app.queue}.dlq", passive=True)
        return queue.declaration_result.message_count == count
    finally:
        await channel.close()


async def test_a_dlq_purge_with_the_app_deletes_the_blobs_of_what_it_deleted(
    make_app: Callable[..., App], blobs: PostgresBlobs, connection: Any
) -> None:
    app = make_app(large_payloads=blobs, max_body_size=None, retry=RetryPolicy(delays=()))

    @app.handler(Report)
    async def handle(msg: Report) -> None:
        raise ValueError("never")

    async with running(Worker(app)):
        async with app.publisher() as pub:
            for n in range(3):
                await pub.publish(Report(name=f"r{n}", content=big(100 * 1024)))
        await wait_for(lambda: dlq_holds(connection, app, 3), timeout=60)
    assert len(await rows(blobs)) == 3
    from rabbitq.payloads.steps import blobs_released

    tally = await dlq.purge(app.queue, url=app.url, released=[blobs_released(blobs)], limit=2)
    assert tally.done == 2
    assert len(await rows(blobs)) == 1  # the one still in the DLQ keeps its blob


async def test_a_failed_publish_deletes_its_upload_and_the_sweep_takes_what_a_kill_left(
    make_app: Callable[..., App], blobs: PostgresBlobs, connection: Any
) -> None:
    app = make_app(large_payloads=blobs, max_body_size=None)

    @app.handler(Report)
    async def handle(msg: Report) -> None: ...

    # No queue is bound yet: the publish is unroutable, so it fails after the upload.
    async with app.publisher() as pub:
        with pytest.raises(Unroutable):
            await pub.publish(Report(name="lost", content=big(200 * 1024)))
    assert await rows(blobs) == {}
    # A publisher killed between upload and confirm leaves a pending row (as if):
    from rabbitq.payloads.reference import new_ref

    data = big(200 * 1024).encode()
    from datetime import UTC, datetime

    await blobs.put(new_ref(data), data, datetime.now(UTC))
    assert [s for s, _ in (await rows(blobs)).values()] == ["pending"]
    swept = await blobs.sweep()
    assert (swept.orphans, swept.tombstones) == (1, 0)
    assert await rows(blobs) == {}


async def test_publishers_killed_mid_upload_leave_0_orphans_after_a_sweep(
    make_app: Callable[..., App], blobs: PostgresBlobs, connection: Any, tmp_path: Any
) -> None:
    """The issue's proof: publishers killed -9 at moments spread over their publishes
    (during an upload, between upload and confirm, after a confirm); then one sweep.
    Every blob left belongs to a message in the queue, and no orphan is left."""
    app = make_app(large_payloads=blobs, max_body_size=None)

    @app.handler(Report)
    async def handle(msg: Report) -> None: ...

    await declare_topology(connection, app)
    for kill_after in (0.3, 1.5, 3.0, 5.0):
        log = tmp_path / f"pub-{kill_after}.log"
        proc = spawn_logged(
            [sys.executable, "-m", "tests.payloads.publisher_proc", str(app.url), app.exchange,
             app.queue, PG_URL, blobs.table.removesuffix("blobs")],
            log, cwd=Path(__file__).parents[2],
        )  # fmt: skip
        await wait_for(lambda log=log: "uploading 0" in log.read_text(), timeout=60)
        await asyncio.sleep(kill_after)
        proc.kill()
        proc.wait(timeout=30)
    # A killed publisher's upload may still commit: its server session finishes the
    # statement it had received whole. Wait until no session writes the table.
    await wait_for(lambda: no_writer(blobs), timeout=60)
    before = await rows(blobs)
    swept = await blobs.sweep()
    after = await rows(blobs)
    waiting = await drain_queue(connection, app.queue)
    referenced = {m.headers[BLOB] for m in waiting}
    assert {state for state, _ in after.values()} <= {"sent"}
    assert set(after) == referenced, (before, swept, referenced)
    assert swept.orphans == sum(1 for state, _ in before.values() if state == "pending")
    print(f"{len(before)} blobs before the sweep, {swept.orphans} orphans swept, "
          f"{len(waiting)} messages waiting with their blobs")  # fmt: skip


async def no_writer(store: PostgresBlobs) -> bool:
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s"
            " AND pid <> pg_backend_pid()",
            (f'INSERT INTO "{store.table}"%',),
        )
        row = await cur.fetchone()
        return row is not None and row[0] == 0
