"""``publish(delay=..., at=...)`` against a real broker: the message waits in the delay
ladder's levels of its bits, then reaches the app's queue only, never early; bad times
are refused before anything is sent (docs/delays.md)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from rabbitq import DelayError, Message, Unroutable
from rabbitq.ladder import plan as ladder
from tests.helpers import declare_topology, drain_queue, queue_depth, wait_for

pytestmark = pytest.mark.broker


class Note(Message, type="test.delayed.note"):
    n: int


def note_app(make_app, **kwargs):
    app = make_app(**kwargs)

    @app.handler(Note)
    async def handle(msg: Note) -> None: ...

    return app


@pytest.mark.parametrize("queue_type", ["quorum", "classic"])
async def test_a_delayed_message_waits_in_the_level_of_each_set_bit_then_reaches_the_app_queue(
    make_app, connection, queue_type
):
    app = note_app(make_app, queue_type=queue_type)
    await declare_topology(connection, app)
    # 1.375 s = 11 units = 0b1011: levels 3, 1 and 0, in that order.
    before = time.monotonic()
    async with app.publisher() as pub:
        await pub.publish(Note(n=1), delay=1.375)

    async def arrived() -> bool:
        return await queue_depth(connection, app.queue) == 1

    await wait_for(arrived, timeout=10, interval=0.02)
    assert time.monotonic() - before >= 1.375, "delivered before its time"
    [m] = await drain_queue(connection, app.queue)
    hops = sorted(d["queue"] for d in m.headers["x-death"])  # (their order varies)
    assert hops == [ladder.level_name(queue_type, n) for n in (0, 1, 3)]
    assert m.headers[ladder.DELAY_TO] == app.queue
    assert datetime.fromisoformat(m.headers[ladder.DUE]) <= datetime.now(UTC)
    assert m.type == Note.type_name() and m.routing_key == ladder.routing_key(11)


async def test_a_delayed_message_reaches_only_its_app_queue_not_others_bound_to_its_type(
    make_app, connection
):
    app = note_app(make_app)
    other = note_app(make_app)  # the same exchange and type
    prefix = note_app(make_app, queue=f"{app.queue}.more")  # a name that extends app's
    for each in (app, other, prefix):
        await declare_topology(connection, each)
    async with app.publisher() as pub:
        await pub.publish(Note(n=1), delay=0.25)
        await pub.publish(Note(n=2), delay=0)

    async def arrived() -> bool:
        return await queue_depth(connection, app.queue) == 2

    await wait_for(arrived, timeout=10)
    await asyncio.sleep(0.5)  # give a stray copy every chance to show up
    assert await queue_depth(connection, other.queue) == 0
    assert await queue_depth(connection, prefix.queue) == 0


async def test_a_time_in_the_past_is_delivered_at_once(make_app, connection):
    app = note_app(make_app)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        await pub.publish(Note(n=1), at=datetime.now(UTC) - timedelta(hours=1))

    async def arrived() -> bool:
        return await queue_depth(connection, app.queue) == 1

    await wait_for(arrived, timeout=5)
    [m] = await drain_queue(connection, app.queue)
    assert "x-death" not in m.headers  # straight to the delivering exchange


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"at": datetime(2030, 1, 1, 9)}, "is a naive datetime: give it a timezone"),
        ({"delay": -1}, "must be a finite number of seconds, 0 or more"),
        ({"delay": float("nan")}, "must be a finite number of seconds, 0 or more"),
        ({"delay": "5"}, "must be seconds or a timedelta"),
        ({"delay": timedelta(days=49)}, "is longer than the delay ladder holds"),
        ({"at": datetime.now(UTC) + timedelta(days=49)}, "is longer than the delay ladder"),
        ({"delay": 1, "at": datetime.now(UTC)}, "give delay= or at=, not both"),
    ],
)
async def test_an_impossible_delay_or_time_is_refused_before_anything_is_sent(
    make_app, connection, kwargs, says
):
    app = note_app(make_app)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        with pytest.raises(DelayError, match=says) as caught:
            await pub.publish(Note(n=1), **kwargs)
    assert "\n" not in str(caught.value) and isinstance(caught.value, ValueError)
    await asyncio.sleep(0.3)
    assert await queue_depth(connection, app.queue) == 0


async def test_a_delayed_publish_to_an_app_whose_queue_does_not_exist_is_unroutable(make_app):
    app = note_app(make_app)  # never declared
    async with app.publisher() as pub:
        with pytest.raises(Unroutable, match="does not exist, so a delayed message"):
            await pub.publish(Note(n=1), delay=1)
        # the publisher's channel is still usable: the declaration had its own
        with pytest.raises(Unroutable, match="no queue is bound"):
            await pub.publish(Note(n=2))


async def test_the_longest_delay_is_accepted_and_waits_in_every_level(make_app, connection):
    app = note_app(make_app)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        mid = await pub.publish(Note(n=1), delay=ladder.MAX_DELAY)
    top = ladder.level_name("quorum", ladder.LEVELS - 1)
    channel = await connection.channel()
    try:
        # it waits in the top level (24.3 days); take it out again, it is this test's
        found = None
        for _ in range(200):
            message = await (await channel.get_queue(top, ensure=False)).get(fail=False)
            if message is None:
                break
            if message.message_id == mid:
                found = message
                await message.ack()
                break
            await message.nack(requeue=True)
        assert found is not None and found.routing_key == ladder.routing_key(ladder.MAX_UNITS)
    finally:
        await channel.close()
