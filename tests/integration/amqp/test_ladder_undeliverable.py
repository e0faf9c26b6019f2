"""A delayed message whose queue is deleted while it waits (docs/delays.md, "A queue
deleted while its messages wait"), on a private node (the test deletes an app's queue
while its delayed messages are in the shared ladder, and reads the ladder's catch-all).

Before the catch-all, on a quorum ladder such messages stayed in their last level, held
by the level's at-least-once dead-letter worker and retried every 3 minutes; with a few
dozen of them that worker's window was full and every other app's delayed messages
through the level waited with them (measured: none of 200 arrived within 60 s). On a
classic ladder they were dropped. Now the delivering exchange's alternate exchange takes
them into ``rabbitq.delay.undeliverable``: counted, replayable, and nothing else waits.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import aio_pika
import pytest

from rabbitq import App, Message
from tests.broker_node import BrokerNode
from tests.helpers import declare_topology

UNDELIVERABLE = "rabbitq.delay.undeliverable"
DELAY_TO = "rabbitq-delay-to"
DEADLINE = 60.0
"""Generous for 3 s delays on a loaded machine; a jammed level frees itself only after
the broker's 180 s dead-letter timer."""


class Note(Message, type="test.ladder.undeliverable"):
    n: int


@pytest.fixture(scope="module")
def node() -> Iterator[BrokerNode]:
    if shutil.which("rabbitmq-server") is None:
        if os.environ.get("CI"):
            pytest.fail("this test starts a private RabbitMQ node")
        pytest.skip("no rabbitmq-server")
    with BrokerNode.started("rabbitq-ladderjam") as private:
        yield private


@pytest.fixture
async def conn(node: BrokerNode) -> AsyncIterator[aio_pika.abc.AbstractRobustConnection]:
    connection = await aio_pika.connect_robust(node.url)
    try:
        yield connection
    finally:
        await connection.close()


def note_app(url: str, queue_type: str) -> App:
    tag = uuid.uuid4().hex[:8]
    app = App(queue=f"lj.{tag}", exchange=f"lj.{tag}.x", url=url, queue_type=queue_type)

    @app.handler(Note)
    async def handle(msg: Note) -> None: ...

    return app


async def collect(
    conn: aio_pika.abc.AbstractRobustConnection, queue: str, want: int, deadline: float
) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """Messages consumed (and acked) from ``queue`` until ``want`` arrived or the deadline
    passed; counted by consuming, not by a passive declare (which leaves out what
    at-least-once dead-lettering brought into a quorum queue, on 3.10)."""
    channel = await conn.channel()
    q = await channel.declare_queue(queue, passive=True)
    got: list[aio_pika.abc.AbstractIncomingMessage] = []
    end = time.monotonic() + deadline
    while len(got) < want and time.monotonic() < end:
        msg = await q.get(fail=False, no_ack=False)
        if msg is None:
            await asyncio.sleep(0.1)
            continue
        await msg.ack()
        got.append(msg)
    await channel.close()
    return got


@pytest.mark.slow
@pytest.mark.parametrize("queue_type", ["quorum", "classic"])
async def test_a_deleted_queue_s_delayed_messages_neither_block_others_nor_get_lost(
    node, conn, queue_type
):
    gone, healthy = note_app(node.url, queue_type), note_app(node.url, queue_type)
    for app in (gone, healthy):
        await declare_topology(conn, app)
    async with gone.publisher() as pub:
        stranded = {await pub.publish(Note(n=n), delay=3) for n in range(100)}
    channel = await conn.channel()
    await channel.queue_delete(gone.queue)  # while its 100 wait in levels 4 and 3
    await channel.close()
    await asyncio.sleep(5)  # they fall due first, with no queue bound for them
    began = time.monotonic()
    async with healthy.publisher() as pub:  # the same delay: the same levels
        sent = {await pub.publish(Note(n=n), delay=3) for n in range(200)}
    arrived = await collect(conn, healthy.queue, len(sent), DEADLINE)
    took = time.monotonic() - began
    ids = [m.message_id for m in arrived]
    print(f"{queue_type}: {len(set(ids))} of {len(sent)} arrived in {took:.1f} s")
    assert set(ids) == sent, f"{len(sent) - len(set(ids))} of {len(sent)} not there in {took:.0f} s"
    assert len(ids) == len(set(ids)), "duplicates"

    kept = await collect(conn, UNDELIVERABLE, len(stranded), 30)
    kept_ids = [m.message_id for m in kept]
    assert set(kept_ids) == stranded, f"{len(stranded - set(kept_ids))} of 100 lost"
    assert len(kept_ids) == len(set(kept_ids)), "duplicates"
    assert {m.headers[DELAY_TO] for m in kept} == {gone.queue}
