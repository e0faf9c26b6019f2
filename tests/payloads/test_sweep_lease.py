"""A sweep never takes a blob whose publish may still be confirmed (issue 40, item 7):
a publish held by a stalled broker link past ``orphan_after`` keeps its blob through
every sweep meanwhile, and once confirmed its message is handled with its payload whole.
Before, the first sweep after ``orphan_after`` deleted it and the message went to the
DLQ as ``blob-missing``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from rabbitq import App, Worker
from rabbitq.errors import PublishInterrupted, PublishNacked, Unroutable
from rabbitq.payloads import PostgresBlobs
from rabbitq.payloads.lease import never_stored, renew_every
from rabbitq.payloads.reference import new_ref
from tests.chaos.proxy import FaultyProxy

from ..helpers import declare_topology, drain_queue, running, wait_for
from .test_large_payloads import PG_URL, Report, big, rows


def test_a_lease_is_renewed_three_times_per_orphan_after() -> None:
    assert renew_every(timedelta(seconds=3)) == 1.0
    assert renew_every(timedelta(0)) > 0  # orphan_after=0 (tests): still a pause between


@pytest.mark.parametrize(
    ("exc", "gone"),
    [
        (Unroutable("returned"), True),
        (PublishNacked("nacked"), True),
        (PublishInterrupted("not connected to RabbitMQ: nothing was sent to x"), True),
        (PublishInterrupted("no confirm within 60s; it may or may not have been stored"), False),
        (asyncio.CancelledError(), False),
        (ConnectionResetError(), False),
    ],
)
def test_only_a_publish_that_certainly_stored_nothing_deletes_its_upload(exc, gone) -> None:
    assert never_stored(exc) is gone


async def renewal_keeps_the_blob(blobs: Any) -> None:
    """A pending blob whose lease ran out, renewed: no sweep takes it; a sent one stays sent."""
    data = b"z" * 10
    ref = new_ref(data)
    now = datetime.now(UTC)
    await blobs.put(ref, data, now - timedelta(seconds=1))  # its lease ran out
    await blobs.renew(ref.id, now + timedelta(hours=1))  # its publisher still waits
    await blobs.renew(ref.id, now - timedelta(hours=1))  # (never moved earlier)
    assert (await blobs.sweep()).orphans == 0
    found = await blobs.get(ref.id)
    assert found is not None and (found.state, found.data) == ("pending", data)
    await blobs.sent(ref.id)
    await blobs.renew(ref.id, now + timedelta(hours=1))
    found = await blobs.get(ref.id)
    assert found is not None and found.state == "sent"


@pytest.mark.services
async def test_a_renewed_lease_keeps_a_pending_blob_from_the_sweep(leased: PostgresBlobs) -> None:
    await renewal_keeps_the_blob(leased)


@pytest.fixture
async def leased(uid: str) -> AsyncIterator[PostgresBlobs]:
    store = PostgresBlobs(PG_URL, above=64 * 1024, prefix=f"t{uid}_", orphan_after=1)
    yield store
    await store.close()
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        await conn.execute(f'DROP TABLE IF EXISTS "t{uid}_blobs"')


@pytest.mark.services
async def test_a_sweep_during_a_held_publish_keeps_its_blob_for_the_confirm(
    make_app: Callable[..., App], leased: PostgresBlobs, connection: Any, broker_url: str
) -> None:
    app = make_app(large_payloads=leased, max_body_size=None)
    got: list[tuple[str, str]] = []

    @app.handler(Report)
    async def handle(msg: Report) -> None:
        got.append((msg.name, msg.content))

    await declare_topology(connection, app)
    content = big(300 * 1024)
    proxy = await FaultyProxy.start(urlsplit(broker_url).port or 5672)
    swept = []
    try:
        async with app.publisher(url=proxy.url(broker_url)) as pub:
            await pub.publish(Report(name="before", content="small"))  # the link is open
            proxy.stall()  # the broker's link freezes: the next publish waits for its confirm
            held = asyncio.create_task(pub.publish(Report(name="held", content=content)))
            await wait_for(lambda: rows_pending(leased), timeout=30)
            for _ in range(4):  # each past orphan_after=1 since the upload
                await asyncio.sleep(1.0)
                swept.append(await leased.sweep())
            assert not held.done(), "the publish was not held"
            proxy.resume()
            await asyncio.wait_for(held, 60)
    finally:
        await proxy.close()
    assert sum(s.orphans for s in swept) == 0, swept
    async with running(Worker(app, grace_period=5)):
        await wait_for(lambda: len(got) >= 2, timeout=60)
        await asyncio.sleep(1.0)  # settled: nothing more comes
    assert sorted(got) == [("before", "small"), ("held", content)]
    assert await drain_queue(connection, app.topology().dlq.name) == []


async def rows_pending(store: PostgresBlobs) -> bool:
    try:
        return [state for state, _ in (await rows(store)).values()] == ["pending"]
    except psycopg.errors.UndefinedTable:  # created by the first upload
        return False
