"""Two schedulers that both hold the lease, as in a partial partition (issue 40): each
side's Mnesia keeps its own exclusive ``<queue>.schedules.lease``, so each side's
scheduler takes it, and after the heal RabbitMQ 3.10 stays partitioned until a restart.
Here both are simply told they hold it. The fence (docs/schedules.md, "Through a network
partition") must leave one publishing: counted after both ran, no tick published twice
and none missing."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import aio_pika
import pytest

from rabbitq import App, Message
from rabbitq.schedule import plan
from rabbitq.schedule.runner import Scheduler

RUN = 8.0  # seconds both run; the ticks are counted after they stopped


class Beat(Message, type="test.schedule.twolease"):
    at: str


@pytest.fixture
async def counted(
    connection, make_app, uid
) -> AsyncIterator[tuple[App, aio_pika.abc.AbstractQueue]]:
    app = make_app(queue_type="quorum")

    @app.schedule(every=timedelta(seconds=1), catch_up="all")
    def beat(tick: datetime) -> Beat:
        return Beat(at=tick.isoformat())

    channel = await connection.channel()
    ex = await channel.declare_exchange(app.exchange, aio_pika.ExchangeType.TOPIC, durable=True)
    queue = await channel.declare_queue(f"t.{uid}.beats", durable=True)
    await queue.bind(ex, Beat.type_name())
    try:
        yield app, queue
    finally:
        for name in (plan.progress_queue(app.queue), queue.name):
            with contextlib.suppress(Exception):
                await channel.queue_delete(name)


def holding_the_lease(app: App, name: str) -> Scheduler:
    scheduler = Scheduler(app)
    scheduler.name = name  # two processes: two names

    async def granted(connection: object) -> bool:
        return True  # its side's Mnesia lets it declare the exclusive queue

    scheduler._take_lease = granted  # type: ignore[method-assign]
    return scheduler


async def test_two_schedulers_that_both_hold_the_lease_publish_each_tick_once(counted):
    app, queue = counted
    sides = [holding_the_lease(app, "side-a:1"), holding_the_lease(app, "side-b:2")]
    tasks = [asyncio.create_task(s.run()) for s in sides]
    await asyncio.sleep(RUN)
    leaders = [s.name for s in sides if s.leading]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    ids: Counter[str] = Counter()
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        ids[message.message_id or ""] += 1
    twice = sorted(i for i, n in ids.items() if n > 1)
    ticks = sorted(datetime.strptime(i.split(":")[2], "%Y%m%dT%H%M%SZ") for i in ids)
    print(f"\n{len(ids)} ticks, {len(twice)} published twice; leading at the end: {leaders}")
    assert ids, "no tick published"
    assert not twice, (twice, dict(ids))
    assert all(b - a == timedelta(seconds=1) for a, b in zip(ticks, ticks[1:], strict=False))
    assert len(leaders) == 1, leaders
