"""What lands in ``<queue>.dlq``, with which reason and headers, and that bad input never
stops the worker (docs/contract.md: guarantee 4, "Wire format")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aio_pika
import pytest
from aio_pika.abc import AbstractIncomingMessage

from rabbitq import Context, Message, PermanentError, RetryPolicy, Worker
from tests.helpers import Recorder, drain_queue, publish_bare, queue_depth, running, wait_for

pytestmark = pytest.mark.broker

SENT_AT = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


class Invoice(Message, type="test.dlq.invoice"):
    number: str
    cents: int


class Ping(Message, type="test.dlq.ping"):
    seq: int


class CardDeclined(PermanentError):
    """A subclass of PermanentError is permanent too."""


async def publish_raw(
    connection,
    exchange_name: str,
    body: bytes,
    *,
    routing_key: str,
    type: str | None,
    message_id: str | None = "mid-1",
    **properties,
) -> None:
    """Publish as another producer would: aio-pika directly, to the app's exchange."""
    channel = await connection.channel(publisher_confirms=True)
    try:
        exchange = await channel.declare_exchange(
            exchange_name, aio_pika.ExchangeType.TOPIC, durable=True
        )
        await exchange.publish(
            aio_pika.Message(
                body,
                type=type,
                message_id=message_id,
                correlation_id="corr-1",
                timestamp=SENT_AT,
                content_type="application/json",
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                **properties,
            ),
            routing_key=routing_key,
            mandatory=True,
        )
    finally:
        await channel.close()


def assert_dead_letter(
    dead: AbstractIncomingMessage,
    app,
    *,
    reason: str,
    attempt: int,
    error_prefix: str,
    body: bytes,
    type: str,
    routing_key: str,
    handler_failed: bool,
    before: datetime,
) -> None:
    """Every DLQ header of the contract, and the body and standard properties unchanged."""
    headers = dead.headers
    assert headers["rabbitq-reason"] == reason
    assert headers["rabbitq-attempt"] == attempt
    error = headers["rabbitq-error"]
    assert error.startswith(error_prefix), error
    assert len(error.encode()) <= 1024
    if handler_failed:
        traceback = headers["rabbitq-traceback"]
        assert traceback.startswith(("Traceback (most recent call last):", "…")), traceback
        assert len(traceback.encode()) <= 8192
    failed_at = datetime.fromisoformat(headers["rabbitq-failed-at"])
    assert failed_at.utcoffset() == timedelta(0)
    assert before <= failed_at <= datetime.now(UTC)
    assert headers["rabbitq-queue"] == app.queue
    assert headers["rabbitq-original-exchange"] == app.exchange
    assert headers["rabbitq-original-routing-key"] == routing_key

    assert dead.body == body
    assert dead.message_id == "mid-1"
    assert dead.type == type
    assert dead.correlation_id == "corr-1"
    assert dead.timestamp == SENT_AT
    assert dead.content_type == "application/json"
    assert dead.delivery_mode == aio_pika.DeliveryMode.PERSISTENT


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
async def test_a_message_that_fails_every_attempt_is_dead_lettered_as_exhausted(
    make_app, connection, queue_type
):
    app = make_app(retry=RetryPolicy(delays=(0.1, 0.2)), queue_type=queue_type)
    attempts: list[int] = []

    @app.handler(Invoice)
    async def invoice(msg: Invoice, ctx: Context) -> None:
        attempts.append(ctx.attempt)
        # An error far over the 1 KiB / 8 KiB bounds, to see them applied.
        raise RuntimeError("ledger rejected: " + "é" * 6000)

    before = datetime.now(UTC)
    body = b'{"number": "INV-1", "cents": 500}'
    rec = Recorder()
    async with running(Worker(app, hooks=rec)):
        await publish_raw(
            connection, app.exchange, body, routing_key="test.dlq.invoice", type="test.dlq.invoice"
        )
        await wait_for(lambda: rec.count("dead_lettered") == 1, timeout=15)

    assert attempts == [1, 2, 3]
    assert rec.events[-1] == ("dead_lettered", "test.dlq.invoice", "exhausted")
    [dead] = await drain_queue(connection, f"{app.queue}.dlq")
    assert_dead_letter(
        dead,
        app,
        reason="exhausted",
        attempt=3,
        error_prefix="RuntimeError: ledger rejected: éé",
        body=body,
        type="test.dlq.invoice",
        routing_key="test.dlq.invoice",
        handler_failed=True,
        before=before,
    )
    traceback = dead.headers["rabbitq-traceback"]
    assert traceback.startswith("Traceback")  # the frames are kept...
    assert "in invoice" in traceback
    assert "é…" in traceback  # ...and the huge message was cut


async def test_a_permanent_error_dead_letters_at_once_without_a_retry(make_app, connection):
    app = make_app(retry=RetryPolicy(delays=(0.1, 0.2)))
    attempts: list[int] = []

    @app.handler(Invoice)
    def invoice(msg: Invoice, ctx: Context) -> None:  # a sync handler, run in a thread
        attempts.append(ctx.attempt)
        raise CardDeclined("card declined: insufficient funds")

    before = datetime.now(UTC)
    body = b'{"number": "INV-2", "cents": 700}'
    rec = Recorder()
    async with running(Worker(app, hooks=rec)):
        await publish_raw(
            connection, app.exchange, body, routing_key="test.dlq.invoice", type="test.dlq.invoice"
        )
        await wait_for(lambda: rec.count("dead_lettered") == 1, timeout=15)

    assert attempts == [1]
    assert rec.events == [("dead_lettered", "test.dlq.invoice", "permanent")]
    for spec in app.topology().retries:
        assert await queue_depth(connection, spec.name) == 0
    [dead] = await drain_queue(connection, f"{app.queue}.dlq")
    assert_dead_letter(
        dead,
        app,
        reason="permanent",
        attempt=1,
        error_prefix="CardDeclined: card declined: insufficient funds",
        body=body,
        type="test.dlq.invoice",
        routing_key="test.dlq.invoice",
        handler_failed=True,
        before=before,
    )
    assert "CardDeclined: card declined" in dead.headers["rabbitq-traceback"]
    assert "in invoice" in dead.headers["rabbitq-traceback"]


# Poison input: body, type property, DLQ reason, start of rabbitq-error, a word it names.
POISON = [
    pytest.param(
        b'{"number": "INV-3", "cents": ',
        "test.dlq.invoice",
        "invalid",
        "DecodeError: ",
        "JSON",
        id="not-json",
    ),
    pytest.param(
        b'{"number": "INV-3", "cents": "a lot"}',
        "test.dlq.invoice",
        "invalid",
        "DecodeError: ",
        "cents",
        id="fails-validation",
    ),
    pytest.param(
        b"[1, 2, 3]", "test.dlq.invoice", "invalid", "DecodeError: ", "object", id="not-an-object"
    ),
    pytest.param(
        b'{"number": "INV-3", "cents": 1}',
        "test.dlq.retired-type",  # e.g. from a producer that is newer than this service
        "unknown-type",
        "UnknownType: ",
        "test.dlq.retired-type",
        id="unknown-type",
    ),
]


@pytest.mark.parametrize(("body", "type_name", "reason", "error_prefix", "names"), POISON)
async def test_poison_input_is_dead_lettered_with_its_reason_and_the_worker_keeps_consuming(
    make_app, connection, body, type_name, reason, error_prefix, names
):
    app = make_app(retry=RetryPolicy(delays=(0.1,)))
    handled: list[Message] = []

    @app.handler(Invoice)
    async def invoice(msg: Invoice) -> None:
        handled.append(msg)

    @app.handler(Ping)
    async def ping(msg: Ping) -> None:
        handled.append(msg)

    before = datetime.now(UTC)
    rec = Recorder()
    async with running(Worker(app, hooks=rec)):
        await publish_raw(
            connection, app.exchange, body, routing_key="test.dlq.invoice", type=type_name
        )
        await wait_for(lambda: rec.count("dead_lettered") == 1, timeout=15)
        # Published after the poison, handled by the same worker.
        async with app.publisher() as pub:
            await pub.publish(Invoice(number="INV-4", cents=1))
            await pub.publish(Ping(seq=1))
        await wait_for(lambda: len(handled) == 2, timeout=15)

    assert handled == [Invoice(number="INV-4", cents=1), Ping(seq=1)]
    assert rec.count("retried") == 0  # poison is never retried
    [dead] = await drain_queue(connection, f"{app.queue}.dlq")
    assert names in dead.headers["rabbitq-error"]
    assert_dead_letter(
        dead,
        app,
        reason=reason,
        attempt=1,
        error_prefix=error_prefix,
        body=body,
        type=type_name,
        routing_key="test.dlq.invoice",
        handler_failed=False,
        before=before,
    )


async def test_a_message_without_a_type_property_is_dispatched_by_its_routing_key(
    make_app, connection
):
    app = make_app()
    seen: list[tuple[Invoice, Context]] = []

    @app.handler(Invoice)
    async def invoice(msg: Invoice, ctx: Context) -> None:
        seen.append((msg, ctx))

    async with running(Worker(app)):
        await publish_raw(
            connection,
            app.exchange,
            b'{"number": "INV-5", "cents": 5}',
            routing_key="test.dlq.invoice",
            type=None,
        )
        await wait_for(lambda: len(seen) == 1, timeout=15)

    [(msg, ctx)] = seen
    assert msg == Invoice(number="INV-5", cents=5)
    assert ctx.type == "test.dlq.invoice"
    assert ctx.message_id == "mid-1"


async def test_a_message_without_a_message_id_still_runs_with_a_derived_context_message_id(
    make_app, connection, broker_url
):
    app = make_app()
    seen: list[Context] = []

    @app.handler(Invoice)
    async def invoice(msg: Invoice, ctx: Context) -> None:
        seen.append(ctx)

    rec = Recorder()
    async with running(Worker(app, hooks=rec)):
        # aio-pika always sets a message_id; a bare AMQP client need not.
        await publish_bare(
            broker_url,
            app.exchange,
            "test.dlq.invoice",
            b'{"number": "INV-6", "cents": 6}',
            type="test.dlq.invoice",
            content_type="application/json",
        )
        await wait_for(lambda: rec.count("succeeded") == 1, timeout=15)

    [ctx] = seen
    assert ctx.message_id.startswith("derived-")  # documented: derived from type and body
    assert ctx.attempt == 1


async def test_a_failing_message_without_a_type_keeps_its_resolved_type_in_retry_and_dlq(
    make_app, connection, broker_url
):
    # Back from a retry queue, a delivery's routing key is the queue's name: the copies
    # must carry the type resolved on the first delivery.
    app = make_app(retry=RetryPolicy(delays=(0.1,)))
    seen: list[Context] = []

    @app.handler(Invoice)
    async def invoice(msg: Invoice, ctx: Context) -> None:
        seen.append(ctx)
        raise RuntimeError("still failing")

    rec = Recorder()
    body = b'{"number": "INV-7", "cents": 7}'
    async with running(Worker(app, hooks=rec)):
        await publish_bare(broker_url, app.exchange, "test.dlq.invoice", body, message_id="mid-7")
        await wait_for(lambda: rec.count("dead_lettered") == 1, timeout=15)

    assert rec.events == [
        ("retried", "test.dlq.invoice", "100ms"),
        ("dead_lettered", "test.dlq.invoice", "exhausted"),
    ]
    assert [(c.attempt, c.type) for c in seen] == [(1, "test.dlq.invoice"), (2, "test.dlq.invoice")]
    assert seen[1].routing_key == app.queue  # the retry came back by the default exchange
    [dead] = await drain_queue(connection, f"{app.queue}.dlq")
    assert dead.body == body
    assert dead.type == "test.dlq.invoice"
    assert dead.message_id == "mid-7"
    assert dead.headers["rabbitq-reason"] == "exhausted"
    assert dead.headers["rabbitq-original-exchange"] == app.exchange
    assert dead.headers["rabbitq-original-routing-key"] == "test.dlq.invoice"


async def test_a_message_without_a_message_id_keeps_the_same_message_id_on_every_attempt(
    make_app, connection, broker_url
):
    app = make_app(retry=RetryPolicy(delays=(0.1, 0.1)))
    seen: list[Context] = []

    @app.handler(Invoice)
    async def invoice(msg: Invoice, ctx: Context) -> None:
        seen.append(ctx)
        raise RuntimeError("still failing")

    rec = Recorder()
    async with running(Worker(app, hooks=rec)):
        await publish_bare(
            broker_url,
            app.exchange,
            "test.dlq.invoice",
            b'{"number": "INV-8", "cents": 8}',
            type="test.dlq.invoice",
        )
        await wait_for(lambda: rec.count("dead_lettered") == 1, timeout=15)

    # Derived (docs/contract.md), but the same on every attempt: it is the idempotency key.
    assert len(seen) == 3
    assert len({c.message_id for c in seen}) == 1
    [dead] = await drain_queue(connection, f"{app.queue}.dlq")
    assert dead.message_id == seen[0].message_id
