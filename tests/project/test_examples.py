"""The example services, tested as their users would test them: with rabbitq.testing,
no broker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import orjson
import psycopg
import pytest

from examples import email_service, payment_service
from examples.email_service import SIMULATOR_DOMAIN, SandboxSender, SendEmail
from examples.payment_service import (
    CapturePayment,
    Currency,
    GatewayTimeout,
    SandboxGateway,
)
from rabbitq import App
from rabbitq.crypto.codec import cipher_of
from rabbitq.testing import deliver
from tests.helpers import service_fixture

ROOT = Path(__file__).resolve().parents[2]
PAYMENT_ID = UUID("6f1c3a52-4a8e-4ab7-9d6e-2f5b8c1e9a10")


# -- email service -----------------------------------------------------------------------


def welcome(to: str = "ada@example.com") -> SendEmail:
    return SendEmail(to=to, subject="Welcome", body="Hello Ada")


@pytest.fixture
def sender() -> SandboxSender:
    return SandboxSender()


@pytest.fixture
def emails(sender: SandboxSender) -> App:
    return email_service.create_app(sender=sender)


async def test_an_email_is_sent_with_the_message_id_as_idempotency_key(emails, sender):
    result = await deliver(emails, welcome(), message_id="m-1")

    assert result.acked
    assert list(sender.outbox) == ["m-1"]
    assert sender.outbox["m-1"].to == "ada@example.com"


async def test_a_redelivered_email_is_not_sent_twice(emails, sender):
    first = await deliver(emails, welcome(), message_id="m-1")
    again = await deliver(emails, welcome(), message_id="m-1", redelivered=True)

    assert first.acked and again.acked
    assert len(sender.outbox) == 1


async def test_an_email_without_message_id_is_keyed_by_its_content(emails, sender):
    body = welcome().model_dump_json().encode()
    sent_at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    for _ in range(2):  # another producer's message, delivered twice without message_id
        result = await deliver(emails, body, type="email.send", message_id="", timestamp=sent_at)
        assert result.acked
    [key] = sender.outbox  # one send: the derived id is the same both times
    assert key.startswith("derived-")


async def test_a_deferred_email_is_retried_in_the_first_tier(emails):
    result = await deliver(emails, welcome(f"tempfail@{SIMULATOR_DOMAIN}"))

    assert result.retried
    assert (result.tier, result.delay, result.next_attempt) == (1, "5s", 2)
    assert result.error is not None and result.error.startswith("DeliveryDeferred: 421")


@pytest.mark.parametrize(("attempt", "delay"), [(2, "30s"), (3, "5m"), (4, "30m")])
async def test_a_deferred_email_waits_longer_each_attempt(emails, attempt, delay):
    result = await deliver(emails, welcome(f"tempfail@{SIMULATOR_DOMAIN}"), attempt=attempt)

    assert result.retried and result.tier == attempt and result.delay == delay


async def test_a_deferred_email_is_dead_lettered_after_five_attempts(emails):
    result = await deliver(emails, welcome(f"tempfail@{SIMULATOR_DOMAIN}"), attempt=5)

    assert result.dead_lettered and result.reason == "exhausted"


async def test_a_hard_bounce_is_dead_lettered_at_once(emails, sender):
    result = await deliver(emails, welcome(f"bounce@{SIMULATOR_DOMAIN}"))

    assert result.dead_lettered and result.reason == "permanent"
    assert result.error is not None and result.error.startswith("HardBounce: 550")
    assert sender.outbox == {}


@pytest.mark.parametrize(
    "payload",
    [
        {"to": "not-an-address", "subject": "hi", "body": "x"},
        {"to": "ada@example", "subject": "hi", "body": "x"},
        {"to": "ada @example.com", "subject": "hi", "body": "x"},
        {"to": "ada@example.com", "subject": "hi\r\nBcc: all@example.com", "body": "x"},
        {"to": "ada@example.com", "subject": "", "body": "x"},
        {"to": "ada@example.com", "subject": "hi"},
    ],
    ids=["no-at", "no-tld", "space", "header-injection", "empty-subject", "no-body"],
)
async def test_an_invalid_email_is_dead_lettered_as_invalid(emails, sender, payload):
    result = await deliver(emails, orjson.dumps(payload), type="email.send")

    assert result.dead_lettered and result.reason == "invalid"
    assert sender.outbox == {}


def test_an_address_domain_is_lowercased_but_not_its_local_part():
    assert welcome(" Ada.Lovelace@Example.COM ").to == "Ada.Lovelace@example.com"


def clear(app, error, message_id):
    """An encrypted app's error text, decrypted with its key ring."""
    cipher = cipher_of(app)
    assert cipher is not None and error is not None
    return cipher.open_text(error, message_id)


# -- payment service ---------------------------------------------------------------------
# On the machine's real PostgreSQL (the app's idempotency store and outbox), with tables
# of this test's own prefix, dropped afterwards.

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def capture(amount: str = "49.90", currency: Currency = Currency.EUR) -> CapturePayment:
    return CapturePayment(payment_id=PAYMENT_ID, amount=Decimal(amount), currency=currency)


def raw_capture(**fields: object) -> bytes:
    payload: dict[str, object] = {
        "payment_id": str(PAYMENT_ID),
        "amount": "49.90",
        "currency": "EUR",
        "requested_at": "2025-01-31T12:00:00+01:00",
    }
    payload.update(fields)
    return orjson.dumps({k: v for k, v in payload.items() if v is not None})


class RecordingGateway(SandboxGateway):
    """The sandbox, remembering what each call received; fails the first ``failures``
    calls, before capturing (``after=False``) or after (a crash after the capture)."""

    def __init__(
        self, failures: int = 0, error: Exception | None = None, *, after: bool = False
    ) -> None:
        super().__init__()
        self.failures = failures
        self.after = after
        self.error = error or GatewayTimeout("no answer from the gateway within 10s")
        self.received: list[tuple[UUID, Decimal, Currency, str]] = []

    async def capture(self, payment_id, amount, currency, *, idempotency_key):
        self.received.append((payment_id, amount, currency, idempotency_key))
        if self.failures and not self.after:
            self.failures -= 1
            raise self.error
        reference = await super().capture(
            payment_id, amount, currency, idempotency_key=idempotency_key
        )
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the worker lost the database right after the capture")
        return reference


@pytest.fixture
def prefix() -> str:
    return f"t_{uuid.uuid4().hex[:10]}_"


@pytest.fixture
def gateway() -> RecordingGateway:
    return RecordingGateway()


@pytest.fixture
@service_fixture
async def make_payments(prefix):
    made: list[App] = []

    def factory(**kwargs) -> App:
        kwargs.setdefault("gateway", RecordingGateway())
        app = payment_service.create_app(db=PG_URL, prefix=prefix, **kwargs)
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


@pytest.fixture
def payments(make_payments, gateway) -> App:
    return make_payments(gateway=gateway)


async def captures(app: App) -> list[tuple]:
    table = payment_service.captures_table(app.outbox.sql.table.removesuffix("outbox"))
    async with await psycopg.AsyncConnection.connect(PG_URL) as conn:
        cur = await conn.execute("SELECT to_regclass(%s)", (table,))
        if (await cur.fetchone())[0] is None:  # created with the first committed capture
            return []
        cur = await conn.execute(f"SELECT payment_id, amount, currency, reference FROM {table}")
        return await cur.fetchall()


async def test_a_capture_is_recorded_and_announced_under_the_payments_key(payments, gateway):
    result = await deliver(payments, capture(), message_id="m-1")

    assert result.acked and not result.duplicate
    assert await captures(payments) == [(PAYMENT_ID, Decimal("49.90"), "EUR", f"cap_{PAYMENT_ID}")]
    # the payment id is the gateway's idempotency key
    assert gateway.received == [(PAYMENT_ID, Decimal("49.90"), Currency.EUR, str(PAYMENT_ID))]
    assert (await payments.outbox.stats())[0] == 1  # payment.captured, for the relay
    assert result.published == ()  # in the outbox, not sent by the worker


async def test_the_same_message_delivered_twice_captures_once(payments, gateway):
    first = await deliver(payments, capture(), message_id="m-1")
    again = await deliver(payments, capture(), message_id="m-1", redelivered=True)

    assert first.acked and again.acked and again.duplicate
    assert len(gateway.received) == 1  # the duplicate never reached the gateway
    assert len(await captures(payments)) == 1
    assert (await payments.outbox.stats())[0] == 1  # announced once


async def test_two_messages_for_one_payment_are_one_capture(payments, gateway):
    await deliver(payments, capture(), message_id="m-1")
    second = await deliver(payments, capture(), message_id="m-2")

    assert second.duplicate
    assert list(gateway.captures) == [str(PAYMENT_ID)]


async def test_a_worker_that_fails_after_the_capture_does_not_capture_twice(make_payments):
    gateway = RecordingGateway(failures=1, after=True)
    app = make_payments(gateway=gateway)

    first = await deliver(app, capture(), message_id="m-1")
    assert first.retried and first.next_attempt == 2
    assert await captures(app) == []  # nothing recorded: the key was released
    second = await deliver(app, capture(), message_id="m-1", attempt=2)

    assert second.acked
    assert len(gateway.received) == 2
    assert list(gateway.captures) == [str(PAYMENT_ID)]  # the gateway's idempotency key held
    assert len(await captures(app)) == 1


async def test_a_capture_without_message_id_is_keyed_by_its_payment(payments, gateway):
    for _ in range(2):  # another producer's message, sent twice without message_id
        result = await deliver(payments, raw_capture(), type="payment.capture", message_id="")
        assert result.acked
    assert list(gateway.captures) == [str(PAYMENT_ID)]
    assert len(gateway.received) == 1


async def test_amounts_stay_decimal_from_the_wire_to_the_gateway_and_the_database(
    payments, gateway
):
    result = await deliver(payments, raw_capture(amount="0.10"), type="payment.capture")

    assert result.acked
    (_, amount, _, _), *_ = gateway.received
    assert type(amount) is Decimal and amount == Decimal("0.10") and str(amount) == "0.10"
    ((_, stored, _, _),) = await captures(payments)
    assert type(stored) is Decimal and str(stored) == "0.10"


def test_amounts_travel_as_exact_strings_with_two_places():
    wire = orjson.loads(capture("12.3").model_dump_json())

    assert wire["amount"] == "12.30"
    assert CapturePayment.model_validate(wire).amount == Decimal("12.30")


async def test_a_gateway_timeout_is_retried_in_the_first_capture_tier(make_payments):
    app = make_payments(gateway=RecordingGateway(failures=1))

    result = await deliver(app, capture(), message_id="m-1")

    assert result.retried
    assert (result.tier, result.delay, result.next_attempt) == (1, "10s", 2)
    # the example is encrypted: the error's text is ciphertext, its type clear
    assert result.error is not None and result.error.startswith("GatewayTimeout: enc:")
    assert (
        clear(app, result.error, "m-1") == "GatewayTimeout: no answer from the gateway within 10s"
    )
    assert await captures(app) == []


async def test_a_retried_capture_succeeds_on_the_next_attempt(make_payments):
    gateway = RecordingGateway(failures=1)
    app = make_payments(gateway=gateway)

    first = await deliver(app, capture(), message_id="m-1")
    assert first.retried and first.next_attempt == 2
    second = await deliver(app, capture(), message_id="m-1", attempt=2)

    assert second.acked and list(gateway.captures) == [str(PAYMENT_ID)]


@pytest.mark.parametrize(("attempt", "delay"), [(2, "1m"), (3, "10m")])
async def test_an_unavailable_gateway_waits_longer_each_attempt(payments, attempt, delay):
    result = await deliver(payments, capture("3000.00"), attempt=attempt)

    assert result.retried and result.tier == attempt and result.delay == delay


async def test_an_unavailable_gateway_is_dead_lettered_after_four_attempts(payments):
    result = await deliver(payments, capture("3000.00"), attempt=4)

    assert result.dead_lettered and result.reason == "exhausted"
    assert await captures(payments) == []


async def test_a_declined_payment_is_dead_lettered_at_once_and_can_be_replayed(payments, gateway):
    result = await deliver(payments, capture("2500.00"), message_id="m-2")

    assert result.dead_lettered and result.reason == "permanent"
    error = clear(payments, result.error, "m-2")
    assert error == "PaymentDeclined: declined 2001: insufficient funds"
    assert await captures(payments) == [] and gateway.captures == {}
    again = await deliver(payments, capture("2500.00"))  # the key was released: it runs
    assert again.dead_lettered and len(gateway.received) == 2


async def test_a_hanging_gateway_is_a_failed_attempt_after_the_timeout(make_payments):
    class Hanging:
        async def capture(self, payment_id, amount, currency, *, idempotency_key):
            await asyncio.sleep(60)
            return "never"

    app = make_payments(gateway=Hanging(), timeout=0.05)

    result = await deliver(app, capture(), message_id="m-3")

    assert result.retried and result.delay == "10s"
    assert (
        clear(app, result.error, "m-3") == "HandlerTimeout: handler exceeded its timeout of 0.05s"
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"amount": "12.345"},
        {"amount": 12.345},
        {"amount": 12.34},  # a JSON number is a float, even when it looks exact
        {"amount": "1e2"},
        {"amount": "12.340000000000001"},
        {"amount": "NaN"},
        {"amount": "-5.00"},
        {"amount": "0"},
        {"amount": "1000000.01"},
        {"amount": True},
        {"currency": "eur"},
        {"currency": "XXX"},
        {"payment_id": "12345"},
        {"requested_at": "2025-01-31T12:00:00"},
        {"payment_id": None},
    ],
    ids=lambda f: "-".join(f"{k}={v!r}" for k, v in f.items()),
)
async def test_an_invalid_capture_is_dead_lettered_as_invalid(payments, gateway, fields):
    result = await deliver(payments, raw_capture(**fields), type="payment.capture")

    assert result.dead_lettered and result.reason == "invalid"
    assert gateway.received == []


def test_the_capture_handler_retries_on_its_own_policy_within_the_apps_queues():
    app = payment_service.app
    handler = app.handlers["payment.capture"]
    topology = app.topology()

    assert handler.retry.delays == (10, 60, 600) and handler.timeout == 20
    assert handler.idempotency is app.idempotency and app.outbox is not None
    assert [q.name for q in topology.retries] == [  # no unused example-payments.retry.1s
        "example-payments.retry.10s",
        "example-payments.retry.1m",
        "example-payments.retry.10m",
    ]
    assert all(q.arguments["x-queue-type"] == "quorum" for q in topology.queues)
    assert topology.routing_keys == ("payment.capture",)


async def test_a_restarted_worker_remembers_what_was_captured(make_payments, gateway):
    for _ in range(2):  # a restart: a new app and store over the same database
        app = make_payments(gateway=gateway)
        assert (await deliver(app, capture(), message_id="m-1")).acked
    assert len(gateway.received) == 1


# -- the CLI validates against the example's models before connecting --------------------


@pytest.mark.parametrize(
    ("spec", "type_name", "payload", "complaint"),
    [
        (
            "examples.payment_service:app",
            "payment.capture",
            {"payment_id": str(uuid.uuid4()), "amount": "12.345", "currency": "EUR"},
            "no more than 2 decimal places",
        ),
        (
            "examples.email_service:app",
            "email.send",
            {"to": "nobody", "subject": "hi", "body": "x"},
            "not an email address",
        ),
    ],
)
def test_publishing_an_invalid_message_from_the_cli_fails_before_connecting(
    spec, type_name, payload, complaint
):
    proc = subprocess.run(
        [sys.executable, "-m", "rabbitq", "publish", spec, type_name, orjson.dumps(payload)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        # Nothing listens here: validation must fail before any connection attempt.
        env={"RABBITQ_URL": "amqp://guest:guest@127.0.0.1:1/", "PATH": ""},
    )

    assert proc.returncode == 2
    assert complaint in proc.stderr
    assert "cannot reach" not in proc.stderr
