"""The example services against a real RabbitMQ: a worker in-process, messages
published through the broker, outcomes read back from the queues.

Each test builds the example's app with ``create_app`` under its own queue and exchange
names and deletes them afterwards. The CLI tests use the module-level apps on an
exchange of their own (``$EXAMPLES_EXCHANGE``), so that the queues of someone trying
the examples on the same broker are neither fed nor in the way (issue 25, item 4).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import aio_pika
import orjson
import psycopg
import pytest
from aio_pika.abc import AbstractRobustConnection

from examples import email_service, payment_service
from examples.email_service import SandboxSender
from examples.payment_service import (
    CapturePayment,
    Currency,
    GatewayTimeout,
    SandboxGateway,
)
from rabbitq import App, RetryPolicy, Worker
from rabbitq.crypto.codec import cipher_of

from ..helpers import Recorder, drain_queue, running, wait_for

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]
FAST = RetryPolicy(delays=(0.2,))
PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def build(make_app: Callable[..., App]) -> Callable[..., App]:
    """``build(create_app, **kwargs)``: an example app under this test's own names."""
    return lambda create_app, **kwargs: make_app(create=create_app, **kwargs)


def reasons(messages: list[aio_pika.abc.AbstractIncomingMessage]) -> list[str]:
    return sorted(str(m.headers["rabbitq-reason"]) for m in messages)


# -- email service -----------------------------------------------------------------------


async def test_the_email_samples_are_sent_bounced_and_retried_then_dead_lettered(build, connection):
    sender = SandboxSender()
    app = build(email_service.create_app, sender=sender, retry=FAST)
    rec = Recorder()

    async with running(Worker(app, hooks=rec)):
        ids = await email_service.publish_samples(app)
        await wait_for(lambda: rec.count("dead_lettered") == 2)

    assert list(sender.outbox) == [ids[0]]  # the message_id was the idempotency key
    assert ("retried", "email.send", "200ms") in rec.events
    dead = await drain_queue(connection, app.topology().dlq.name)
    assert reasons(dead) == ["exhausted", "permanent"]
    bounced = next(m for m in dead if m.headers["rabbitq-reason"] == "permanent")
    assert bounced.message_id == ids[1]
    assert str(bounced.headers["rabbitq-error"]).startswith("HardBounce: 550")
    assert orjson.loads(bounced.body)["to"] == "bounce@simulator.example"


async def test_an_email_published_twice_with_one_message_id_is_sent_once(build):
    sender = SandboxSender()
    app = build(email_service.create_app, sender=sender)
    rec = Recorder()
    email = email_service.SendEmail(to="ada@example.com", subject="Hi", body="Twice")

    async with running(Worker(app, hooks=rec)):
        async with app.publisher() as pub:
            await pub.publish(email, message_id="same-id")
            await pub.publish(email, message_id="same-id")
        await wait_for(lambda: rec.count("succeeded") == 2)

    assert list(sender.outbox) == ["same-id"]


# -- payment service ---------------------------------------------------------------------


class FlakyGateway(SandboxGateway):
    """Times out on the first ``failures`` calls, then behaves as the sandbox."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def capture(self, payment_id, amount, currency, *, idempotency_key):
        if self.failures:
            self.failures -= 1
            raise GatewayTimeout("no answer from the gateway within 10s")
        return await super().capture(payment_id, amount, currency, idempotency_key=idempotency_key)


@pytest.fixture
async def pay(build):
    """``pay(**kwargs)``: the payment service under this test's names, on the real
    PostgreSQL with tables of its own prefix (dropped afterwards)."""
    prefix = f"t_{uuid.uuid4().hex[:10]}_"
    made: list[App] = []

    def factory(**kwargs: Any) -> App:
        app = build(payment_service.create_app, db=PG_URL, prefix=prefix, **kwargs)
        made.append(app)
        return app

    yield factory
    for app in made:
        await app.idempotency.close()
        await app.outbox.close()
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (prefix + "%",)
        )
        for (name,) in await cur.fetchall():
            await conn.execute(f'DROP TABLE "{name}"')


async def test_the_payment_samples_capture_once_and_dead_letter_the_rest(pay, connection):
    gateway = SandboxGateway()
    app = pay(gateway=gateway, retry=FAST)
    rec = Recorder()

    async with running(Worker(app, hooks=rec)):
        ids = await payment_service.publish_samples(app)
        await wait_for(lambda: rec.count("dead_lettered") == 2 and rec.count("succeeded") == 2)

    assert ids[0] == ids[1]  # the duplicate
    # The two copies may arrive together: the second waits for the first's key, then is
    # a duplicate; either way the gateway captures once.
    assert len(gateway.captures) == 1
    assert (await app.outbox.stats())[0] == 1  # one payment.captured for the relay
    dead = await drain_queue(connection, app.topology().dlq.name)
    assert reasons(dead) == ["exhausted", "permanent"]
    declined = next(m for m in dead if m.headers["rabbitq-reason"] == "permanent")
    # the example is encrypted: its body on the wire is ciphertext, read with its keys
    assert b"2500.00" not in declined.body
    assert orjson.loads(opened(app, declined))["amount"] == "2500.00"  # a string
    assert declined.type == "payment.capture"


async def test_a_gateway_timeout_waits_in_the_retry_queue_then_captures(pay, connection):
    gateway = FlakyGateway(failures=1)
    app = pay(gateway=gateway, retry=FAST)
    rec = Recorder()
    message = CapturePayment(payment_id=uuid.uuid4(), amount=Decimal("0.10"), currency=Currency.CHF)

    async with running(Worker(app, hooks=rec)):
        async with app.publisher() as pub:
            await pub.publish(message)
        await wait_for(lambda: rec.count("succeeded") == 1)

    assert rec.events == [("retried", "payment.capture", "200ms"), ("succeeded", "payment.capture")]
    assert list(gateway.captures) == [str(message.payment_id)]
    assert await drain_queue(connection, app.topology().dlq.name) == []


async def test_the_payment_queues_are_quorum_queues(pay, connection):
    app = pay()

    async with running(Worker(app)):
        pass

    channel = await connection.channel()
    try:
        for spec in app.topology().queues:
            # A passive declare succeeds for any arguments; redeclaring with the planned
            # ones (quorum included) succeeds only if the broker holds the same.
            await channel.declare_queue(spec.name, durable=True, arguments=dict(spec.arguments))
    finally:
        await channel.close()
    assert app.topology().main.arguments["x-queue-type"] == "quorum"


# -- the CLI and `python -m` with the module-level apps ----------------------------------


@pytest.fixture
async def examples_exchange(connection: AbstractRobustConnection, uid: str) -> Any:
    """An exchange of this test's own for the module-level apps (``$EXAMPLES_EXCHANGE``):
    queues a person left from trying the examples are never fed, and never in the way."""
    name = f"t.{uid}.examples"
    yield name
    channel = await connection.channel()
    await channel.exchange_delete(name)
    await channel.close()


def run(args: list[str], broker_url: str, exchange: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RABBITQ_URL": broker_url, "EXAMPLES_EXCHANGE": exchange},
    )


def rabbitq_cli() -> list[str]:
    script = Path(sys.executable).parent / "rabbitq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "rabbitq"]


async def test_the_cli_publishes_a_validated_capture_to_the_examples_exchange(
    connection, broker_url, examples_exchange
):
    channel = await connection.channel()
    exchange = await channel.declare_exchange(
        examples_exchange, aio_pika.ExchangeType.TOPIC, durable=True
    )
    tap = await channel.declare_queue(exclusive=True, auto_delete=True)
    await tap.bind(exchange, routing_key="payment.capture")
    payment_id = str(uuid.uuid4())
    body = {"payment_id": payment_id, "amount": "49.9", "currency": "EUR"}

    try:
        proc = run(
            [
                *rabbitq_cli(),
                "publish",
                "examples.payment_service:app",
                "payment.capture",
                orjson.dumps(body).decode(),
                "--message-id",
                "cli-1",
            ],
            broker_url,
            examples_exchange,
        )
        assert proc.returncode == 0, proc.stderr
        assert "message_id=cli-1" in proc.stdout
        got = await tap.get(timeout=10)
        await got.ack()
    finally:
        await tap.delete(if_unused=False, if_empty=False)
        await channel.close()

    assert (got.type, got.message_id, got.content_type) == (
        "payment.capture",
        "cli-1",
        "application/vnd.rabbitq.encrypted",  # the example is encrypted (docs/privacy.md)
    )
    wire = orjson.loads(opened(payment_service.app, got))
    assert wire["payment_id"] == payment_id
    assert wire["amount"] == "49.90"  # validated and written with two places
    assert wire["requested_at"].endswith("Z")  # filled in, timezone-aware


async def test_the_cli_refuses_a_capture_that_no_queue_would_receive(broker_url, examples_exchange):
    body = {"payment_id": str(uuid.uuid4()), "amount": "1.00", "currency": "USD"}

    proc = run(
        [
            *rabbitq_cli(),
            "publish",
            "examples.payment_service:app",
            "payment.capture",
            orjson.dumps(body).decode(),
        ],
        broker_url,
        examples_exchange,
    )

    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"Error: no queue is bound to exchange {examples_exchange!r} with routing key "
        "'payment.capture'; nothing was stored; queue 'example-payments' is not declared "
        "yet: start a worker of this app or run 'rabbitq topology "
        "examples.payment_service:app' first"
    ]


async def test_publishing_the_email_samples_before_a_worker_ran_says_what_to_do(
    broker_url, examples_exchange
):
    proc = run([sys.executable, "-m", "examples.email_service"], broker_url, examples_exchange)

    assert proc.returncode == 1
    assert "no queue is bound" in proc.stderr
    assert "rabbitq worker examples.email_service:app" in proc.stderr


def opened(app, message):
    """The clear body of a message of an encrypted app, read with its key ring."""
    cipher = cipher_of(app)
    assert cipher is not None
    key_id = message.headers["rabbitq-key-id"]
    return cipher.open_body(key_id, message.body, message.message_id, message.type)
