"""``app.sync_publisher()`` against a real broker: threads sharing one publisher, every
message confirmed and counted in the queue, a connection dropped by the broker, the
closed and in-loop errors, ``delay=``, and a publisher used in a forked child.

The sync code runs in threads of its own (``asyncio.to_thread``): called on the test's
event loop it would be refused, as the in-loop test shows.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import threading
import time
import warnings

import pytest

from rabbitq import ConfigurationError, Message, PublishError, PublishInterrupted
from rabbitq.ladder import plan as ladder
from tests.helpers import declare_topology, drain_queue, queue_depth, wait_for
from tests.integration.worker.test_reconnect import close_connections_named


class Note(Message, type="test.sync_publisher.note"):
    n: int


def note_app(make_app, **kwargs):
    app = make_app(**kwargs)

    @app.handler(Note)
    async def handle(msg: Note) -> None: ...

    return app


def connections_named(name: str) -> int:
    """How many connections the broker has under the client-given ``name``."""
    out = subprocess.run(
        ["rabbitmqctl", "list_connections", "client_properties", "-q", "--no-table-headers"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    return sum(f'"{name}"' in line or f'<<"{name}">>' in line for line in out.splitlines())


def in_threads(count: int, work) -> list:
    """``work(k)`` in ``count`` threads at once; their results, and any error raised."""
    results: list = [None] * count
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            results[k] = work(k)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [], errors[:3]
    return results


async def arrived_ids(connection, queue: str, count: int) -> collections.Counter[str]:
    """Consume ``queue`` until ``count`` messages came (or a minute passed), and half a
    second more (a duplicate would be there too by then); how many times each id came."""
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=1000)
    counts: collections.Counter[str] = collections.Counter()
    got_all = asyncio.Event()

    async def take(message) -> None:
        counts[message.message_id] += 1
        if counts.total() >= count:
            got_all.set()

    q = await channel.get_queue(queue)
    tag = await q.consume(take, no_ack=True)
    try:
        with contextlib.suppress(TimeoutError):  # fewer: the test says how many are lost
            await asyncio.wait_for(got_all.wait(), 60)
        await asyncio.sleep(0.5)
    finally:
        await q.cancel(tag)
        await channel.close()
    return counts


@pytest.mark.slow
async def test_eight_threads_publish_2000_through_one_sync_publisher_each_once(
    make_app, connection
):
    app = note_app(make_app)
    await declare_topology(connection, app)

    def publish_all() -> list[list[str]]:
        with app.sync_publisher() as pub:
            return in_threads(8, lambda k: [pub.publish(Note(n=k * 250 + i)) for i in range(250)])

    per_thread = await asyncio.to_thread(publish_all)
    ids = [mid for chunk in per_thread for mid in chunk]
    assert len(ids) == 2000 and len(set(ids)) == 2000  # all returned: all confirmed
    counts = await arrived_ids(connection, app.queue, 2000)
    duplicates = {mid: n for mid, n in counts.items() if n > 1}
    assert duplicates == {}, f"{len(duplicates)} messages arrived more than once"
    assert set(counts) == set(ids), f"lost: {len(set(ids) - set(counts))}"


async def test_publish_many_and_delay_through_the_sync_publisher(make_app, connection):
    app = note_app(make_app)
    await declare_topology(connection, app)

    async def depth_is(n: int) -> bool:
        return await queue_depth(connection, app.queue) == n

    pub = app.sync_publisher()
    try:
        many = await asyncio.to_thread(pub.publish_many, [Note(n=n) for n in range(100)], window=32)
        assert len(many) == 100 and len(set(many)) == 100
        await wait_for(lambda: depth_is(100), timeout=30)
        sent = time.monotonic()
        delayed = await asyncio.to_thread(pub.publish, Note(n=100), delay=1.0)
    finally:
        await asyncio.to_thread(pub.close)
    await wait_for(lambda: depth_is(101), timeout=30, interval=0.02)
    assert time.monotonic() - sent >= 1.0, "delivered before its time"
    # Taken once, at the end (a basic.get's ack can be lost to the channel's close on
    # RabbitMQ 3.10's quorum queues, and the message come back): counted here.
    arrived = await drain_queue(connection, app.queue)
    counts = collections.Counter(m.message_id for m in arrived)
    assert counts == {mid: 1 for mid in [*many, delayed]}
    [m] = [m for m in arrived if m.message_id == delayed]
    assert m.headers[ladder.DELAY_TO] == app.queue


async def test_after_close_a_publish_says_so_in_one_line_and_sends_nothing(
    make_app, connection
):
    app = note_app(make_app)
    await declare_topology(connection, app)
    pub = app.sync_publisher()
    await asyncio.to_thread(pub.publish, Note(n=1))
    await asyncio.to_thread(pub.close)
    with pytest.raises(PublishInterrupted) as info:
        await asyncio.to_thread(pub.publish, Note(n=2))
    assert str(info.value).startswith("nothing was sent: this sync publisher is closed")
    assert [m.body for m in await drain_queue(connection, app.queue)] == [b'{"n":1}']


async def test_called_on_a_running_event_loop_it_points_to_the_async_publisher(make_app):
    pub = note_app(make_app).sync_publisher()
    with pytest.raises(ConfigurationError, match="async with app.publisher"):
        pub.publish(Note(n=1))
    pub.close()


async def test_a_connection_the_broker_closes_midway_is_reconnected_and_nothing_is_lost(
    make_app, connection
):
    """With ``retry_for``, publishes that meet the drop wait for the reconnection: every
    one of the 8 x 100 returns, and each id is in the queue (a retried publish may be
    stored twice, at-least-once: counted and shown, not a failure)."""
    app = note_app(make_app)
    await declare_topology(connection, app)
    name = f"rabbitq publisher {app.queue}"
    dropped = threading.Event()

    def publish_all() -> list[list[str]]:
        with app.sync_publisher(retry_for=60) as pub:
            pub.publish(Note(n=-1))  # connected, so there is a connection to close

            def work(k: int) -> list[str]:
                ids = []
                for i in range(100):
                    ids.append(pub.publish(Note(n=k * 100 + i)))
                    if i == 30 and k == 0:
                        assert close_connections_named(name) == 1
                        dropped.set()
                return ids

            return in_threads(8, work)

    per_thread = await asyncio.to_thread(publish_all)
    assert dropped.is_set()
    ids = [mid for chunk in per_thread for mid in chunk]
    assert len(ids) == 800 and len(set(ids)) == 800
    counts = await arrived_ids(connection, app.queue, 801)
    lost = set(ids) - set(counts)
    assert lost == set(), f"{len(lost)} confirmed messages are not in the queue"
    twice = sum(n - 1 for n in counts.values())
    print(f"801 published, {sum(counts.values())} arrived, {twice} duplicate(s)")


async def test_without_retry_for_a_publish_during_the_drop_fails_clearly_then_works_again(
    make_app, connection
):
    app = note_app(make_app)
    await declare_topology(connection, app)
    name = f"rabbitq publisher {app.queue}"

    def publish_through_a_drop() -> tuple[list[str], list[PublishError]]:
        sent, failed = [], []
        with app.sync_publisher() as pub:
            sent.append(pub.publish(Note(n=0)))
            assert close_connections_named(name) == 1
            deadline = time.monotonic() + 60
            while len(sent) < 2 and time.monotonic() < deadline:
                try:
                    sent.append(pub.publish(Note(n=1)))
                except PublishError as exc:  # the drop: said, never a silent success
                    failed.append(exc)
                    time.sleep(0.05)
            sent.append(pub.publish(Note(n=2)))
        return sent, failed

    sent, failed = await asyncio.to_thread(publish_through_a_drop)
    assert len(sent) == 3, f"no publish succeeded after the drop; errors: {failed[-1:]}"
    assert all(isinstance(e, PublishInterrupted) for e in failed), failed[:3]
    counts = await arrived_ids(connection, app.queue, 3)
    assert set(sent) <= set(counts)


async def test_a_publisher_used_before_a_fork_publishes_in_the_child_and_still_in_the_parent(
    make_app, connection
):
    """gunicorn ``--preload``: the app module (and its sync publisher, already used) is
    imported in the parent, then each worker is forked. The child opens its own
    connection; the parent's, whose socket the child shares, is never used by it, so the
    parent's next publish still goes through on it (bytes written on it by the child
    would corrupt its framing and make the broker close it)."""
    app = note_app(make_app)
    await declare_topology(connection, app)
    name = f"rabbitq publisher {app.queue}"

    def fork_and_publish() -> tuple[str, list[str], str, int]:
        pub = app.sync_publisher()
        first = pub.publish(Note(n=1))
        read, write = os.pipe()
        with warnings.catch_warnings():  # Python 3.12+ warns on a fork beside threads
            warnings.simplefilter("ignore", DeprecationWarning)
            child = os.fork()
        if child == 0:
            code = 1
            signal.alarm(60)
            try:
                ids = [pub.publish(Note(n=10 + i)) for i in range(10)]
                pub.close()
                os.write(write, " ".join(ids).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read, "rb") as answer:
            child_ids = answer.read().decode().split()
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        last = pub.publish(Note(n=2))
        connections = connections_named(name)
        pub.close()
        return first, child_ids, last, connections

    first, child_ids, last, connections = await asyncio.to_thread(fork_and_publish)
    assert len(child_ids) == 10
    assert connections == 1  # the parent's, still open; the child's closed at its close()
    counts = await arrived_ids(connection, app.queue, 12)
    assert set(counts) == {first, last, *child_ids} and sum(counts.values()) == 12
