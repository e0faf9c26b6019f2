"""The transactional outbox and its relay, against the real PostgreSQL and RabbitMQ."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from rabbitq import Message
from rabbitq.effects.metrics import OutboxMetrics
from rabbitq.effects.relay import Relay, Row, chains

from ..helpers import wait_for
from .conftest import Note, all_sent, received


def test_rows_with_a_key_form_one_chain_in_id_order_and_rows_without_one_chain_each() -> None:
    def row(i: int, key: str | None) -> Row:
        return Row(i, "x", "t", f"m{i}", "t", b"{}", None, None, key)

    got = chains([row(3, "a"), row(1, "a"), row(2, None), row(4, "b"), row(5, None)])
    assert [[r.id for r in c] for c in got] == [[1, 3], [2], [4], [5]]


async def test_a_row_is_pending_only_if_its_transaction_commits(make_outbox, pg, bound) -> None:
    app, _ = bound
    outbox = make_outbox(app)
    await outbox.open()
    with pytest.raises(RuntimeError):
        async with pg.transaction():
            await outbox.publish(pg, Note(seq=1))
            raise RuntimeError("the business change failed")
    assert (await outbox.stats())[0] == 0
    async with pg.transaction():
        mid = await outbox.publish(pg, Note(seq=2), message_id="m-2")
    assert mid == "m-2"
    pending, age = await outbox.stats()
    assert pending == 1 and age >= 0
    assert app.outbox is outbox


async def test_the_relay_publishes_every_row_once_in_order_per_key_and_marks_it_sent(
    make_outbox, pg, bound
) -> None:
    app, queue = bound
    outbox = make_outbox(app, batch=17, poll_interval=0.02)
    async with pg.transaction():
        for i in range(100):
            await outbox.publish(pg, Note(seq=i, key=f"k{i % 3}"), key=f"k{i % 3}")
    metrics = OutboxMetrics(outbox.sql.table)
    relay = Relay(outbox, observer=metrics)
    task = asyncio.create_task(relay.run())
    await wait_for(lambda: all_sent(outbox), timeout=30)
    relay.stop()
    await task
    messages = await received(queue)
    seqs = [orjson.loads(m.body)["seq"] for m in messages]
    assert sorted(seqs) == list(range(100))  # all, each once
    for k in range(3):
        ours = [s for s in seqs if s % 3 == k]
        assert ours == sorted(ours)  # in order per key
    assert metrics.relayed_rows.labels(outbox.sql.table)._value.get() == 100
    assert metrics.pending_rows.labels(outbox.sql.table)._value.get() == 0
    assert all(m.message_id and m.type == "outbox.note" for m in messages)


async def test_an_unroutable_row_holds_back_only_its_key_and_is_counted(
    make_outbox, pg, bound
) -> None:
    app, queue = bound

    class Stray(Message, type="nobody.listens"):
        n: int

    outbox = make_outbox(app, poll_interval=0.02)
    async with pg.transaction():
        await outbox.publish(pg, Note(seq=1, key="a"), key="a")
        await outbox.publish(pg, Stray(n=1), key="b")
        await outbox.publish(pg, Note(seq=2, key="b"), key="b")  # must wait behind the stray
        await outbox.publish(pg, Note(seq=3))
    metrics = OutboxMetrics(outbox.sql.table)
    relay = Relay(outbox, observer=metrics)
    task = asyncio.create_task(relay.run())
    await wait_for(
        lambda: metrics.errors.labels(outbox.sql.table, "publish")._value.get() >= 2, timeout=30
    )
    relay.stop()
    await task
    seqs = sorted(orjson.loads(m.body)["seq"] for m in await received(queue))
    assert seqs == [1, 3]
    pending, _ = await outbox.stats()
    assert pending == 2  # the stray and the row behind it
    assert metrics.pending_rows.labels(outbox.sql.table)._value.get() == 2


async def test_a_second_relay_stands_by_until_the_first_stops(make_outbox, pg, bound) -> None:
    app, _ = bound
    first = Relay(make_outbox(app, poll_interval=0.02))
    second = Relay(make_outbox(app, poll_interval=0.02))
    t1 = asyncio.create_task(first.run())
    await asyncio.wait_for(first.leader.wait(), 10)
    t2 = asyncio.create_task(second.run())
    await asyncio.sleep(0.5)
    assert not second.leader.is_set()
    first.stop()
    await t1
    await asyncio.wait_for(second.leader.wait(), 10)
    second.stop()
    await t2
