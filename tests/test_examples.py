"""The example services, tested as their users would test them: with rabbitq.testing,
no broker."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import orjson
import pytest

from examples import email_service, payment_service
from examples.email_service import SIMULATOR_DOMAIN, SandboxSender, SendEmail
from examples.payment_service import (
    CapturePayment,
    Currency,
    GatewayTimeout,
    MemoryStore,
    SandboxGateway,
    SqliteStore,
)
from rabbitq import App
from rabbitq.testing import deliver

ROOT = Path(__file__).resolve().parent.parent
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


# -- payment service ---------------------------------------------------------------------


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
    """The sandbox, remembering what each call received; fails the first ``failures`` calls."""

    def __init__(self, failures: int = 0, error: Exception | None = None) -> None:
        super().__init__()
        self.failures = failures
        self.error = error or GatewayTimeout("no answer from the gateway within 10s")
        self.received: list[tuple[UUID, Decimal, Currency, str]] = []

    async def capture(self, payment_id, amount, currency, *, idempotency_key):
        self.received.append((payment_id, amount, currency, idempotency_key))
        if self.failures:
            self.failures -= 1
            raise self.error
        return await super().capture(payment_id, amount, currency, idempotency_key=idempotency_key)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def gateway() -> RecordingGateway:
    return RecordingGateway()


@pytest.fixture
def payments(store, gateway) -> App:
    return payment_service.create_app(store=store, gateway=gateway)


async def test_a_capture_is_acked_and_recorded_under_its_message_id(payments, store, gateway):
    result = await deliver(payments, capture(), message_id="m-1")

    assert result.acked
    done = store.get("m-1")
    assert done is not None
    assert (done.payment_id, done.amount, done.currency) == (
        PAYMENT_ID,
        Decimal("49.90"),
        Currency.EUR,
    )
    assert done.reference == "cap_m-1"
    assert gateway.received == [(PAYMENT_ID, Decimal("49.90"), Currency.EUR, "m-1")]


async def test_the_same_message_delivered_twice_captures_once(payments, store, gateway):
    first = await deliver(payments, capture(), message_id="m-1")
    again = await deliver(payments, capture(), message_id="m-1", redelivered=True)

    assert first.acked and again.acked
    assert len(gateway.received) == 1  # the duplicate never reached the gateway
    assert list(gateway.captures) == ["m-1"]
    assert list(store.captures) == ["m-1"]


async def test_two_messages_are_two_captures_even_for_the_same_payment(payments, gateway):
    await deliver(payments, capture(), message_id="m-1")
    await deliver(payments, capture(), message_id="m-2")

    assert sorted(gateway.captures) == ["m-1", "m-2"]


async def test_a_capture_lost_before_the_store_write_is_not_repeated(gateway):
    class ForgetfulStore(MemoryStore):
        """Loses the first write, as a worker crash right after the capture would."""

        def __init__(self) -> None:
            super().__init__()
            self.crashed = False

        def add(self, capture):
            if not self.crashed:
                self.crashed = True
                raise ConnectionError("database went away")
            return super().add(capture)

    store = ForgetfulStore()
    app = payment_service.create_app(store=store, gateway=gateway)

    first = await deliver(app, capture(), message_id="m-1")
    assert first.retried and first.next_attempt == 2
    second = await deliver(app, capture(), message_id="m-1", attempt=2)

    assert second.acked
    assert len(gateway.received) == 2
    assert list(gateway.captures) == ["m-1"]  # the gateway's idempotency key held
    assert store.get("m-1") is not None


async def test_a_capture_without_message_id_is_keyed_by_its_payment(payments, gateway):
    for _ in range(2):  # another producer's message, sent twice without message_id
        result = await deliver(payments, raw_capture(), type="payment.capture", message_id="")
        assert result.acked
    assert list(gateway.captures) == [f"payment-{PAYMENT_ID}"]
    assert len(gateway.received) == 1


async def test_amounts_stay_decimal_from_the_wire_to_the_gateway(payments, store, gateway):
    result = await deliver(payments, raw_capture(amount="0.10"), type="payment.capture")

    assert result.acked
    (_, amount, _, key), *_ = gateway.received
    assert type(amount) is Decimal and amount == Decimal("0.10") and str(amount) == "0.10"
    done = store.get(key)
    assert done is not None and type(done.amount) is Decimal and str(done.amount) == "0.10"


def test_amounts_travel_as_exact_strings_with_two_places():
    wire = orjson.loads(capture("12.3").model_dump_json())

    assert wire["amount"] == "12.30"
    assert CapturePayment.model_validate(wire).amount == Decimal("12.30")


async def test_a_gateway_timeout_is_retried_in_the_first_capture_tier(store):
    gateway = RecordingGateway(failures=1)
    app = payment_service.create_app(store=store, gateway=gateway)

    result = await deliver(app, capture(), message_id="m-1")

    assert result.retried
    assert (result.tier, result.delay, result.next_attempt) == (1, "10s", 2)
    assert result.error == "GatewayTimeout: no answer from the gateway within 10s"
    assert store.get("m-1") is None


async def test_a_retried_capture_succeeds_on_the_next_attempt(store):
    gateway = RecordingGateway(failures=1)
    app = payment_service.create_app(store=store, gateway=gateway)

    first = await deliver(app, capture(), message_id="m-1")
    assert first.retried and first.next_attempt == 2
    second = await deliver(app, capture(), message_id="m-1", attempt=2)

    assert second.acked and list(gateway.captures) == ["m-1"]


@pytest.mark.parametrize(("attempt", "delay"), [(2, "1m"), (3, "10m")])
async def test_an_unavailable_gateway_waits_longer_each_attempt(payments, attempt, delay):
    result = await deliver(payments, capture("3000.00"), attempt=attempt)

    assert result.retried and result.tier == attempt and result.delay == delay


async def test_an_unavailable_gateway_is_dead_lettered_after_four_attempts(payments, store):
    result = await deliver(payments, capture("3000.00"), attempt=4)

    assert result.dead_lettered and result.reason == "exhausted"
    assert store.captures == {}


async def test_a_declined_payment_is_dead_lettered_at_once(payments, store, gateway):
    result = await deliver(payments, capture("2500.00"))

    assert result.dead_lettered and result.reason == "permanent"
    assert result.error == "PaymentDeclined: declined 2001: insufficient funds"
    assert store.captures == {} and gateway.captures == {}


async def test_a_hanging_gateway_is_a_failed_attempt_after_the_timeout(store):
    class Hanging:
        async def capture(self, payment_id, amount, currency, *, idempotency_key):
            await asyncio.sleep(60)
            return "never"

    app = payment_service.create_app(store=store, gateway=Hanging(), timeout=0.05)

    result = await deliver(app, capture())

    assert result.retried and result.delay == "10s"
    assert result.error == "HandlerTimeout: handler exceeded its timeout of 0.05s"


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
    assert [q.name for q in topology.retries] == [
        "payments.retry.1s",
        "payments.retry.10s",
        "payments.retry.1m",
        "payments.retry.10m",
    ]
    assert all(q.arguments["x-queue-type"] == "quorum" for q in topology.queues)
    assert topology.routing_keys == ("payment.capture",)


def test_the_sqlite_store_keeps_decimals_exact_and_refuses_a_second_write(tmp_path, store):
    done = payment_service.Capture(
        message_id="m-1",
        payment_id=PAYMENT_ID,
        amount=Decimal("0.30"),
        currency=Currency.CHF,
        reference="cap_m-1",
        captured_at=payment_service._now(),
    )
    db = SqliteStore(tmp_path / "payments.sqlite3")
    try:
        assert db.add(done) is True
        assert db.add(done) is False
        assert db.get("m-1") == done
        assert db.get("m-2") is None
    finally:
        db.close()
    assert store.add(done) is True and store.add(done) is False


async def test_the_sqlite_store_makes_a_capture_idempotent_across_restarts(tmp_path, gateway):
    path = tmp_path / "payments.sqlite3"
    for _ in range(2):  # a worker restart: a new app and store over the same file
        db = SqliteStore(path)
        app = payment_service.create_app(store=db, gateway=gateway)
        try:
            assert (await deliver(app, capture(), message_id="m-1")).acked
        finally:
            db.close()
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
