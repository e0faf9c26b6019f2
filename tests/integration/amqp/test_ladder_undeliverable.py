"""A delayed message whose queue is deleted while it waits (docs/delays.md, "A queue
deleted while its messages wait"), on a private node (the test deletes an app's queue
while its delayed messages are in the shared ladder, and reads the ladder's catch-all).

Before the catch-all, on a quorum ladder such messages stayed in their last level, held
by the level's at-least-once dead-letter worker and retried every 3 minutes; with a few
dozen of them that worker's window was full and every other app's delayed messages
through the level waited with them (measured: none of 200 arrived within 60 s, nor
within 400 s with a longer deadline). On a
classic ladder they were dropped. Now the delivering exchange's alternate exchange takes
them into ``rabbitq.delay.undeliverable``: counted, replayable, and nothing else waits.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import aio_pika
import pytest
from click.testing import CliRunner

from rabbitq import App, Message
from rabbitq._ops.doctor import diagnose
from rabbitq._ops.doctor_probe import gather
from rabbitq.cli import main
from rabbitq.dlq import operations as dlq
from tests.broker_node import BrokerNode
from tests.helpers import declare_topology, purge_undeliverable

UNDELIVERABLE = "rabbitq.delay.undeliverable"
DELIVER = "rabbitq.delay.deliver"
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
    with BrokerNode.started("rabbitq-ladderjam", plugins=("rabbitmq_management",)) as private:
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

    # counted by doctor, with the fix, as the deleted queue's app's: not the healthy one's
    async def counted(app: App) -> list[str]:
        facts = await gather(app, url=node.url, management_url=node.management_url)
        assert facts.delay_catch_all is not None and facts.delay_catch_all.has_argument
        return [f"{f.level} {f.message}" for f in diagnose(facts) if f.topic == "delays"]

    end = time.monotonic() + 30
    while (said := await counted(gone)) != [f"warning {UNDELIVERABLE} holds 100 delayed "
                                            f"message(s) of this app ({gone.queue}: 100) whose "
                                            "queue did not exist when they fell due"]:  # fmt: skip
        assert time.monotonic() < end, said
        await asyncio.sleep(1)
    assert await counted(healthy) == [
        f"info {UNDELIVERABLE} (shared by the vhost's apps) holds 100 delayed message(s) of "
        "other queues than this app's: header rabbitq-delay-to names each one's queue"
    ]
    # replayed, without --to, to the queue they were delayed for, once it is back
    await declare_topology(conn, gone)
    tally = await dlq.replay(UNDELIVERABLE, url=node.url)
    assert (tally.done, tally.failed) == (100, 0), tally
    back = await collect(conn, gone.queue, len(stranded), 30)
    back_ids = [m.message_id for m in back]
    assert set(back_ids) == stranded, f"{len(stranded - set(back_ids))} of 100 lost"
    assert len(back_ids) == len(set(back_ids)), "duplicates"
    assert await collect(conn, UNDELIVERABLE, 1, 1) == []


async def test_a_ladder_declared_by_an_older_rabbitq_is_used_and_doctor_gives_the_policy(node):
    """An existing ``rabbitq.delay.deliver`` without the argument (an exchange's arguments
    cannot change): declaring goes on with it as it is, doctor says which policy to set,
    and with that policy undeliverable messages reach the catch-all too."""
    vhost = f"lj-{uuid.uuid4().hex[:6]}"
    node.ctl("add_vhost", vhost)
    node.ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    url = f"{node.url}{vhost}"
    connection = await aio_pika.connect_robust(url)
    try:
        channel = await connection.channel()
        await channel.declare_exchange(DELIVER, aio_pika.ExchangeType.HEADERS, durable=True)
        await channel.close()
        gone = note_app(url, "quorum")
        await declare_topology(connection, gone)  # no PRECONDITION_FAILED
        facts = await gather(gone, url=url, management_url=node.management_url)
        [finding] = [f for f in diagnose(facts) if f.topic == "delays"]
        assert finding.level == "warning" and "no alternate exchange" in finding.message
        assert finding.fix is not None and finding.fix.startswith("rabbitmqctl set_policy")
        node.ctl(*shlex.split(finding.fix)[1:])  # the fix, as given

        async with gone.publisher() as pub:
            stranded = {await pub.publish(Note(n=n), delay=0.5) for n in range(20)}
        channel = await connection.channel()
        await channel.queue_delete(gone.queue)
        await channel.close()

        async def listed() -> list[dict[str, object]]:
            args = ["dlq", "list", UNDELIVERABLE, "--json", "--limit", "0", "--url", url]
            result = await asyncio.to_thread(CliRunner().invoke, main, args)
            assert result.exit_code == 0, result.output
            return json.loads(result.output)  # one document: an array

        end = time.monotonic() + 30
        while len(shown := await listed()) < len(stranded) and time.monotonic() < end:
            await asyncio.sleep(0.5)
        assert len(shown) == len(stranded), shown
        assert {row["queue"] for row in shown} == {gone.queue}, shown  # rabbitq-delay-to
        kept = await collect(connection, UNDELIVERABLE, len(stranded), 30)
        assert {m.message_id for m in kept} == stranded
        facts = await gather(gone, url=url, management_url=node.management_url)
        assert facts.delay_alternate_policy
        assert [f for f in diagnose(facts) if f.topic == "delays"] == []
    finally:
        await connection.close()


async def test_the_suite_removes_only_its_own_leftovers_from_the_catch_all(node, conn):
    """The session's teardown (tests/conftest.py) removes what this session's deleted
    apps left in the catch-all, and puts every other message back."""
    healthy = note_app(node.url, "quorum")
    await declare_topology(conn, healthy)  # declares the ladder and its catch-all
    ours, theirs = f"t.{uuid.uuid4().hex[:8]}.q0", f"other.{uuid.uuid4().hex[:8]}"
    channel = await conn.channel()
    exchange = await channel.get_exchange(UNDELIVERABLE)
    for queue in (ours, ours, theirs):
        await exchange.publish(aio_pika.Message(b"{}", headers={DELAY_TO: queue}), "")
    await channel.close()
    assert await purge_undeliverable(node.url, {ours}) == 2
    left = await collect(conn, UNDELIVERABLE, 2, 5)
    assert [m.headers[DELAY_TO] for m in left] == [theirs]
