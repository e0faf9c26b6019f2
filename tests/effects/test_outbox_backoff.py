"""Rows the broker refuses wait in their own backoff: they never stall the outbox, they
hold back only the later rows of their key, and the relay's log stays bounded."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

import orjson
import pytest

from rabbitq import App, Message
from rabbitq.effects.backoff import Failure, FailureLog, backoff, summary
from rabbitq.effects.metrics import OutboxMetrics
from rabbitq.effects.relay import Relay

from ..helpers import wait_for


class Note(Message, type="outbox.backoff.note"):
    seq: int


class Stray(Message, type="nobody.listens.backoff"):
    n: int


def test_a_rows_backoff_doubles_from_one_second_up_to_a_minute() -> None:
    assert [backoff(a) for a in (1, 2, 3, 4, 7, 8, 1000)] == [1, 2, 4, 8, 60, 60, 60]


def test_failures_are_logged_as_one_summary_line_at_most_every_period() -> None:
    now = [0.0]
    flog = FailureLog("t_outbox", every=30, clock=lambda: now[0])
    assert flog.line() is None  # nothing failed
    flog.add([Failure(i, "nobody.listens", "unroutable", "no queue", 1) for i in range(200)])
    first = flog.line()
    assert first is not None and "200 failed publish(es) of 200 row(s)" in first
    assert "unroutable 200" in first and "nobody.listens x200" in first
    flog.add([Failure(1, "nobody.listens", "unroutable", "no queue", 2)])
    now[0] = 29
    assert flog.line() is None  # summed until the period is over
    now[0] = 31
    assert "1 failed publish(es) of 1 row(s)" in (flog.line() or "")
    assert flog.line() is None


def test_the_summary_names_the_three_commonest_types_and_counts_the_rest() -> None:
    types = Counter({"a": 5, "b": 4, "c": 3, "d": 1, "e": 1})
    line = summary("t", 5, 14, Counter(nacked=14), types, Failure(9, "a", "nacked", "x", 4), 4)
    assert "types a x5, b x4, c x3, 2 more" in line and "e.g. row 9: x" in line


@pytest.fixture
async def bound(connection, uid, broker_url):
    """An App on a fresh exchange, and a queue bound to outbox.# only."""
    app = App(queue=f"t.{uid}.unused", exchange=f"t.{uid}.x", url=broker_url)
    channel = await connection.channel()
    exchange = await channel.declare_exchange(app.exchange, "topic", durable=True)
    queue = await channel.declare_queue(f"t.{uid}.sink", durable=True)
    await queue.bind(exchange, routing_key="outbox.#")
    yield app, queue
    await queue.delete(if_unused=False, if_empty=False)
    await exchange.delete()
    await channel.close()


class Collect:
    def __init__(self, queue) -> None:
        self.queue = queue
        self.seqs: list[int] = []

    async def more(self) -> list[int]:
        while (msg := await self.queue.get(fail=False, no_ack=True)) is not None:
            self.seqs.append(orjson.loads(msg.body)["seq"])
        return self.seqs


@pytest.mark.slow
@pytest.mark.broker
async def test_200_unroutable_rows_ahead_of_100_routable_ones_do_not_stall_the_relay(
    make_outbox, pg, bound, caplog
) -> None:
    """Counted: all 100 routable rows relayed within 10 s (before: 0 of 100 in 60 s), the
    200 unroutable ones pending and counted as failing, and a bounded log."""
    app, queue = bound
    outbox = make_outbox(app, poll_interval=0.02)
    async with pg.transaction():
        for i in range(200):
            await outbox.publish(pg, Stray(n=i))
        for i in range(100):
            await outbox.publish(pg, Note(seq=i))
    metrics = OutboxMetrics(outbox.sql.table)
    relay = Relay(outbox, observer=metrics)
    collect = Collect(queue)
    caplog.set_level(logging.INFO, logger="rabbitq.outbox")
    started = time.monotonic()
    task = asyncio.create_task(relay.run())
    try:
        await wait_for(lambda: _count_at_least(collect, 100), timeout=10)
        relayed_in = time.monotonic() - started
        await asyncio.sleep(max(0.0, 8 - relayed_in))  # the failing rows retry meanwhile
    finally:
        relay.stop()
        await task
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    failing = metrics.failing_rows.labels(outbox.sql.table)._value.get()
    publish_errors = metrics.errors.labels(outbox.sql.table, "publish")._value.get()
    print(
        f"\noutbox stall: routable 100 relayed in {relayed_in:.1f}s, "
        f"unroutable pending {(await outbox.stats())[0]}, failing metric {failing:g}, "
        f"failed publishes {publish_errors:g}, warning lines {len(warnings)} in "
        f"{time.monotonic() - started:.0f}s"
    )
    assert sorted(collect.seqs) == list(range(100))  # every routable row, once
    assert (await outbox.stats())[0] == 200 and failing == 200
    # each stray tried at 0, 1, 3, 7 s: its backoff, not 5 times a second
    assert 200 <= publish_errors <= 200 * 5
    assert len(warnings) <= 2  # a summary at most every 30 s, whatever the rows


async def _count_at_least(collect: Collect, n: int) -> bool:
    return len(await collect.more()) >= n


@pytest.mark.broker
async def test_a_refused_row_holds_back_only_its_own_key_beyond_one_batch(
    make_outbox, pg, bound
) -> None:
    """Batch of 10: a stray at the head of key a, 30 rows behind it on a, 30 on b, 30
    without a key. Everything but key a goes; key a's rows wait, in order."""
    app, queue = bound
    outbox = make_outbox(app, poll_interval=0.02, batch=10)
    async with pg.transaction():
        await outbox.publish(pg, Stray(n=0), key="a")
        for i in range(30):
            await outbox.publish(pg, Note(seq=i), key="a")
            await outbox.publish(pg, Note(seq=100 + i), key="b")
            await outbox.publish(pg, Note(seq=200 + i))
    relay = Relay(outbox)
    collect = Collect(queue)
    task = asyncio.create_task(relay.run())
    try:
        await wait_for(lambda: _count_at_least(collect, 60), timeout=15)
        await asyncio.sleep(1.5)  # key a stays held while its head fails again
        await collect.more()
    finally:
        relay.stop()
        await task
    assert sorted(collect.seqs) == [*range(100, 130), *range(200, 230)]
    b = [s for s in collect.seqs if 100 <= s < 130]
    assert b == sorted(b)  # key b in order
    assert (await outbox.stats())[0] == 31  # the stray and the 30 behind it
