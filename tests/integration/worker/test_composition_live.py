"""Two features together keep both promises (issue 37): ``ordered_by`` with encryption
or large payloads keeps each key's order, and a handler's follow-ups cross the same
publish steps as ``publish`` (offloaded, into their priority lane, delayed).

Counted after the work settles: handlings out of their key's order, handlings per
message, the follow-up's size in the broker and its payload at the consumer."""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import psycopg
import pytest

from rabbitq import App, Context, Message, PriorityWorker, Worker
from rabbitq._amqp.lanes import lane_queue
from rabbitq.crypto import Keyring
from rabbitq.ladder.plan import DUE
from rabbitq.payloads import PostgresBlobs
from rabbitq.payloads.reference import BLOB
from tests.helpers import declare_topology, running, service_fixture, wait_for

pytestmark = pytest.mark.broker

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
KEYS, PER_KEY, PREFETCH = 10, 20, 16


class Entry(Message, type="test.compose.entry"):
    account: str
    seq: int
    pad: str = ""


class Trigger(Message, type="test.compose.trigger"):
    size: int = 0
    priority: int = 0
    delay: float | None = None


class Report(Message, type="test.compose.report"):
    content: str


@service_fixture
@pytest.fixture
async def blobs(uid: str) -> AsyncIterator[PostgresBlobs]:
    store = PostgresBlobs(PG_URL, above=1024, prefix=f"t{uid}_", orphan_after=0)
    yield store
    await store.close()
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        await conn.execute(f'DROP TABLE IF EXISTS "t{uid}_blobs"')


def keyring() -> Keyring:
    return Keyring({"k1": Keyring.generate_key()}, current="k1")


async def _ordered_run(app: App, connection: Any, pad: str) -> tuple[int, Counter[tuple[str, int]]]:
    """The issue's scenario: KEYS x PER_KEY preloaded, prefetch 16, 0-20 ms handlers;
    (handlings out of their key's order, handlings per message)."""
    handled: list[tuple[str, int]] = []

    @app.handler(Entry, ordered_by=lambda m: m.account)
    async def apply(msg: Entry) -> None:
        await asyncio.sleep(random.uniform(0, 0.02))
        handled.append((msg.account, msg.seq))

    await declare_topology(connection, app)
    async with app.publisher() as pub:
        for seq in range(PER_KEY):
            for k in range(KEYS):
                await pub.publish(Entry(account=f"a{k}", seq=seq, pad=pad))
    async with running(Worker(app, prefetch=PREFETCH)):
        await wait_for(lambda: len(handled) >= KEYS * PER_KEY, timeout=60)
        await asyncio.sleep(0.3)  # settle: a duplicate would show up here
    last: dict[str, int] = {}
    out_of_order = 0
    for account, seq in handled:
        if seq != last.get(account, -1) + 1:
            out_of_order += 1
        last[account] = max(seq, last.get(account, -1))
    return out_of_order, Counter(handled)


def _every_message_once(counts: Counter[tuple[str, int]]) -> None:
    expected = {(f"a{k}", s) for k in range(KEYS) for s in range(PER_KEY)}
    assert set(counts) == expected
    assert {n for n in counts.values()} == {1}


async def test_ordered_by_with_encryption_keeps_each_keys_order(make_app, connection):
    app = make_app(queue_type="classic", encryption=keyring())
    out_of_order, counts = await _ordered_run(app, connection, pad="")
    assert out_of_order == 0
    _every_message_once(counts)


@pytest.mark.services
async def test_ordered_by_with_large_payloads_keeps_each_keys_order(make_app, connection, blobs):
    app = make_app(queue_type="classic", large_payloads=blobs, max_body_size=None)
    out_of_order, counts = await _ordered_run(app, connection, pad="x" * 2048)  # offloaded
    assert out_of_order == 0
    _every_message_once(counts)


def _trigger_app(app: App, got: list[tuple[str, str, float, dict[str, Any]]]) -> None:
    @app.handler(Trigger)
    async def fan(msg: Trigger, ctx: Context) -> None:
        report = Report(content=uuid.uuid4().hex * (msg.size // 32 + 1))
        options: dict[str, Any] = {}  # only what is asked: publish(report) is as before
        if msg.priority:
            options["priority"] = msg.priority
        if msg.delay is not None:
            options["delay"] = msg.delay
        await ctx.publish(report, **options)

    @app.handler(Report)
    async def receive(msg: Report, ctx: Context) -> None:
        got.append((msg.content, ctx.queue, time.monotonic(), dict(ctx.headers)))


async def _spy(connection: Any, app: App) -> aio_pika.abc.AbstractQueue:
    """A queue of this test's own bound to the app's exchange for the follow-ups."""
    channel = await connection.channel()
    queue = await channel.declare_queue(f"{app.queue}.spy", exclusive=True)
    await queue.bind(app.exchange, routing_key=Report.type_name())
    return queue


@pytest.mark.services
async def test_a_large_follow_up_is_offloaded_and_arrives_whole(make_app, connection, blobs):
    app = make_app(queue_type="classic", large_payloads=blobs, max_body_size=None)
    got: list[tuple[str, str, float, dict[str, Any]]] = []
    _trigger_app(app, got)
    await declare_topology(connection, app)
    spy = await _spy(connection, app)
    async with running(Worker(app)):
        async with app.publisher() as pub:
            await pub.publish(Trigger(size=300 * 1024))
        await wait_for(lambda: len(got) == 1, timeout=30)
        await asyncio.sleep(0.3)
    copy = await spy.get(timeout=5)
    assert copy is not None
    assert len(copy.body) < 200  # the reference, not the 300 KB (300,010 bytes before)
    assert copy.headers and copy.headers.get(BLOB)
    assert len(got) == 1 and len(got[0][0]) >= 300 * 1024  # whole at the consumer


async def test_a_follow_up_with_priority_lands_in_its_lane(make_app, connection):
    app = make_app(queue_type="classic", priorities=2)
    got: list[tuple[str, str, float, dict[str, Any]]] = []
    _trigger_app(app, got)
    await declare_topology(connection, app)
    async with running(PriorityWorker(app)):
        async with app.publisher() as pub:
            await pub.publish(Trigger(priority=1))
            await pub.publish(Trigger(priority=0))
        await wait_for(lambda: len(got) == 2, timeout=30)
        await asyncio.sleep(0.3)
    assert sorted(q for _, q, _, _ in got) == sorted([app.queue, lane_queue(app.queue, 1)])


async def test_a_follow_up_with_delay_waits_in_the_ladder(make_app, connection):
    app = make_app(queue_type="classic")
    got: list[tuple[str, str, float, dict[str, Any]]] = []
    _trigger_app(app, got)
    await declare_topology(connection, app)
    async with running(Worker(app)):
        sent = time.monotonic()
        async with app.publisher() as pub:
            await pub.publish(Trigger(delay=1.5))
        await wait_for(lambda: len(got) == 1, timeout=30)
        await asyncio.sleep(0.3)
    assert len(got) == 1
    _, _, arrived, headers = got[0]
    assert DUE in headers  # it went through the delay ladder
    assert arrived - sent >= 1.5 - 0.05  # never earlier than asked (clock tolerance)
