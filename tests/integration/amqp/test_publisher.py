"""The publisher against a real broker: confirms, wire properties, unroutable and
interrupted publishes, pipelining and exact round-trips of values (delayed publishes:
test_delayed_publish.py)."""

from __future__ import annotations

import asyncio
import enum
import subprocess
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import orjson
import pytest

from rabbitq import (
    Context,
    Message,
    Publisher,
    PublishError,
    PublishInterrupted,
    Unroutable,
    Worker,
)
from rabbitq._amqp.connection import connect
from tests.helpers import declare_topology, drain_queue, queue_depth, running, wait_for
from tests.proxy import TcpProxy


class Note(Message, type="test.publisher.note"):
    n: int
    text: str = ""


class Currency(enum.Enum):
    EUR = "EUR"
    USD = "USD"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Payment(Message, type="test.publisher.payment"):
    amount: Decimal
    due: datetime
    account: uuid.UUID
    currency: Currency
    priority: Priority


def note_app(make_app, **kwargs):
    """An app whose queue is bound to ``Note``."""
    app = make_app(**kwargs)

    @app.handler(Note)
    async def handle(msg: Note) -> None:
        pass

    return app


async def test_publish_returns_only_once_the_broker_has_stored_the_message(make_app, connection):
    app = note_app(make_app)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        for n in range(5):
            await pub.publish(Note(n=n))
            # No waiting: the confirm means the message is already in the queue.
            assert await queue_depth(connection, app.queue) == n + 1


async def test_publish_sets_every_property_the_wire_format_lists(make_app, connection):
    app = note_app(make_app)
    await declare_topology(connection, app)
    before = datetime.now(UTC).replace(microsecond=0)
    async with app.publisher() as pub:
        mid = await pub.publish(Note(n=7, text="hello"))
    after = datetime.now(UTC)

    [m] = await drain_queue(connection, app.queue)
    assert m.body == b'{"n":7,"text":"hello"}'
    assert m.content_type == "application/json"
    assert m.delivery_mode == 2
    assert m.type == "test.publisher.note"
    assert m.message_id == mid
    assert len(mid) == 32 and uuid.UUID(hex=mid).version == 4 and mid == uuid.UUID(mid).hex
    assert m.exchange == app.exchange
    assert m.routing_key == "test.publisher.note"
    assert m.timestamp is not None
    stamp = m.timestamp if m.timestamp.tzinfo else m.timestamp.replace(tzinfo=UTC)
    assert before - timedelta(seconds=1) <= stamp <= after


async def test_publish_uses_the_message_id_and_correlation_id_it_is_given(make_app, connection):
    app = note_app(make_app)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        mid = await pub.publish(Note(n=1), message_id="order-42", correlation_id="req-9")
    assert mid == "order-42"
    [m] = await drain_queue(connection, app.queue)
    assert (m.message_id, m.correlation_id) == ("order-42", "req-9")


async def test_each_publish_gets_a_new_message_id(make_app, connection):
    app = note_app(make_app)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        ids = [await pub.publish(Note(n=n)) for n in range(3)]
    assert len(set(ids)) == 3


async def test_an_unroutable_message_raises_unroutable(make_app):
    app = make_app()  # nothing is bound to the exchange: no worker, no topology
    async with app.publisher() as pub:
        with pytest.raises(Unroutable):
            await pub.publish(Note(n=1))


async def test_a_publish_before_any_worker_or_topology_says_what_to_run_first(make_app):
    app = note_app(make_app)  # its queue never declared: no worker, no topology yet
    async with app.publisher() as pub:
        with pytest.raises(Unroutable) as caught:
            await pub.publish(Note(n=1))
        app.loaded_as = "payments.service:app"
        with pytest.raises(Unroutable) as named:
            await pub.publish(Note(n=2))
    said = str(caught.value)
    assert "\n" not in said and "nothing was stored" in said
    assert said.endswith(
        f"queue {app.queue!r} is not declared yet: start a worker of this app or run "
        "'rabbitq topology MODULE:APP' first"
    )
    assert "run 'rabbitq topology payments.service:app' first" in str(named.value)


async def test_a_publish_of_a_type_no_handler_of_the_app_takes_names_the_other_app(make_app):
    app = make_app()
    async with app.publisher() as pub:
        with pytest.raises(Unroutable, match="no handler of this app .* takes 'test.publisher"):
            await pub.publish(Note(n=1))


async def test_a_priority_publish_before_the_lanes_exist_names_the_lane_to_declare(
    make_app, connection
):
    app = note_app(make_app, priorities=3)
    before = note_app(make_app, queue=app.queue)  # the app as deployed before priorities=3
    await declare_topology(connection, before)
    async with app.publisher() as pub:
        await pub.publish(Note(n=0))  # lane 0 is the main queue: it exists
        with pytest.raises(Unroutable, match=rf"queue '{app.queue}.prio.2' is not declared yet"):
            await pub.publish(Note(n=2), priority=2)
    assert await queue_depth(connection, app.queue) == 1


async def test_publish_many_takes_a_priority_and_headers_for_every_message(
    make_app, connection
):
    app = note_app(make_app, priorities=3)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        ids = await pub.publish_many(
            (Note(n=n) for n in range(5)), window=2, priority=2, headers={"x-batch": "b1"}
        )
    lane = await drain_queue(connection, f"{app.queue}.prio.2")
    assert [m.message_id for m in lane] == ids and len(set(ids)) == 5
    assert {m.headers["x-batch"] for m in lane} == {"b1"}
    assert await queue_depth(connection, app.queue) == 0


async def test_publish_many_with_a_delay_delivers_every_message_when_due(make_app, connection):
    app = note_app(make_app)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        ids = await pub.publish_many([Note(n=n) for n in range(3)], delay=0.5)
    async def arrived() -> bool:
        return await queue_depth(connection, app.queue) == 3

    await wait_for(arrived, what="the 3 delayed messages in the queue", timeout=60)
    assert sorted(m.message_id for m in await drain_queue(connection, app.queue)) == sorted(ids)


async def test_publishing_after_the_publisher_closed_raises_publish_interrupted(make_app):
    app = note_app(make_app)
    async with app.publisher() as pub:
        pass
    with pytest.raises(PublishInterrupted) as info:
        await pub.publish(Note(n=1))
    assert isinstance(info.value, PublishError)


async def test_publishing_on_a_connection_the_client_closed_raises_publish_interrupted(
    make_app, broker_url
):
    app = note_app(make_app)
    conn = await connect(broker_url, name="test publisher (closed by client)")
    pub = Publisher(app, url=broker_url, connection=conn)
    await pub.open()
    await conn.close()
    try:
        with pytest.raises(PublishInterrupted):
            await pub.publish(Note(n=1))
    finally:
        await pub.close()


def _close_broker_connections(name: str) -> int:
    """Have the broker close every connection whose client-given name is ``name``."""
    listing = subprocess.run(
        ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    pids = [line.split("\t")[0] for line in listing.splitlines() if name in line]
    for pid in pids:
        subprocess.run(
            ["rabbitmqctl", "-q", "close_connection", pid, "closed by a test"],
            capture_output=True,
            check=True,
            timeout=30,
        )
    return len(pids)


async def test_publishing_after_the_broker_closed_the_connection_raises_publish_interrupted(
    make_app, connection, broker_url, uid
):
    app = note_app(make_app)
    await declare_topology(connection, app)
    name = f"test publisher {uid}"
    # Through a proxy that refuses new connections once the broker has closed this one:
    # aio-pika reconnects at once otherwise, and the publish below could race it.
    proxy = await TcpProxy(broker_url).start()
    conn = await connect(proxy.url, name=name)
    try:
        async with Publisher(app, url=proxy.url, connection=conn) as pub:
            await pub.publish(Note(n=1))
            proxy.refuse()
            assert await asyncio.to_thread(_close_broker_connections, name) == 1
            await wait_for(lambda: not conn.connected.is_set(), timeout=10)
            with pytest.raises(PublishInterrupted):
                await pub.publish(Note(n=2))
    finally:
        await conn.close()
        await proxy.close()
    assert [m.body for m in await drain_queue(connection, app.queue)] == [b'{"n":1,"text":""}']


async def test_publish_many_returns_the_ids_in_order_and_every_message_arrives(
    make_app, connection
):
    app = note_app(make_app)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        # A small window, so that several pipelined batches are needed.
        ids = await pub.publish_many((Note(n=n) for n in range(300)), window=64)

    assert len(ids) == 300 and len(set(ids)) == 300
    arrived = await drain_queue(connection, app.queue)
    assert [m.message_id for m in arrived] == ids
    assert [orjson.loads(m.body)["n"] for m in arrived] == list(range(300))


async def test_decimal_datetime_uuid_and_enum_fields_round_trip_exactly_to_the_handler(
    make_app, connection
):
    app = make_app()
    received: list[tuple[Payment, Context]] = []

    @app.handler(Payment)
    async def handle(msg: Payment, ctx: Context) -> None:
        received.append((msg, ctx))

    sent = Payment(
        amount=Decimal("0.10"),
        due=datetime(2031, 2, 3, 4, 5, 6, 789012, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        account=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        currency=Currency.EUR,
        priority=Priority.HIGH,
    )
    async with running(Worker(app)):
        async with app.publisher() as pub:
            await pub.publish(sent)
        await wait_for(lambda: received, timeout=10)

    [(got, _ctx)] = received
    assert got == sent
    assert type(got.amount) is Decimal and str(got.amount) == "0.10"
    assert got.due == sent.due
    assert got.due.utcoffset() == timedelta(hours=5, minutes=30)
    assert got.due.microsecond == 789012
    assert type(got.account) is uuid.UUID and got.account == sent.account
    assert got.currency is Currency.EUR
    assert got.priority is Priority.HIGH


async def test_a_nacked_publish_is_sent_again_within_retry_for(make_app, connection):
    # Issue 33, item 9: a nack means the broker did not store the message (a quorum
    # queue without a leader during a partition); with retry_for it is sent again, with
    # the same message_id, until it is confirmed. Here a second queue bound to the same
    # type is full and rejects publishes, so every publish is nacked until it is emptied.
    from rabbitq import PublishNacked

    app = make_app()
    app.handler(Note)(lambda m: None)
    await declare_topology(connection, app)
    channel = await connection.channel()
    full = await channel.declare_queue(
        f"{app.queue}.full",
        exclusive=True,
        arguments={"x-max-length": 1, "x-overflow": "reject-publish"},
    )
    await full.bind(app.exchange, Note.type_name())
    async with app.publisher() as pub:
        await pub.publish(Note(n=0))  # fills the side queue
        with pytest.raises(PublishNacked):  # without retry_for: at once
            await pub.publish(Note(n=1))
    async with app.publisher(retry_for=30) as pub:
        sending = asyncio.create_task(pub.publish(Note(n=2)))
        await asyncio.sleep(1.0)  # nacked, and sent again, meanwhile
        assert not sending.done()
        await full.purge()
        message_id = await asyncio.wait_for(sending, timeout=20)
    copies = [m for m in await drain_queue(connection, app.queue) if b'"n":2' in m.body]
    assert copies and {m.message_id for m in copies} == {message_id}  # same id each time
    async with app.publisher(retry_for=1.5) as pub:
        with pytest.raises(PublishNacked, match=r"not confirmed within retry_for=1.5s"):
            await pub.publish(Note(n=3))  # the side queue is full again: gives up, says so
    await channel.close()  # the exclusive side queue goes with it
