"""A payment-capture service: consumes ``payment.capture`` and captures exactly once.

Run a worker from the repository root (it declares the quorum queues
``example-payments``, ``example-payments.retry.*`` and ``example-payments.dlq``, bound
to the ``examples`` exchange; the tables ``payments_idempotency``,
``payments_captures`` and ``payments_outbox`` are created on first use in
``$PAYMENTS_DB``, default ``postgresql://postgres@127.0.0.1:5432/rabbitq_examples``,
a database of their own: ``createdb -h 127.0.0.1 -U postgres rabbitq_examples``)::

    rabbitq effects init examples.payment_service:app     # the tables, checked

    rabbitq worker examples.payment_service:app
    rabbitq outbox relay examples.payment_service:app     # publishes payment.captured

and, in another shell, publish the samples (a capture, the same message again, which
is recognised as a duplicate, a decline, which goes to ``example-payments.dlq`` at once, and a
gateway outage, which is retried in 10s, 1m and 10m before it is dead-lettered)::

    python -m examples.payment_service

or one capture by hand (the amount is a string: a JSON number is a binary float)::

    rabbitq publish examples.payment_service:app payment.capture \\
        '{"payment_id": "6f1c3a52-4a8e-4ab7-9d6e-2f5b8c1e9a10",
          "amount": "49.90", "currency": "EUR"}'

The app is encrypted (docs/privacy.md): amounts and payment ids are AES-GCM ciphertext
in every queue, in the DLQ and in the outbox table, and so is the text of a failure.
Its keys come from ``$PAYMENTS_KEYS`` (``ID=KEY,...``, the first current; make one with
``rabbitq keys generate``); without it, a development key that is written below, so
anything it encrypted is readable by anyone with this file: set your own in production.
``rabbitq dlq show example-payments ID --app examples.payment_service:app`` shows a
dead capture in clear.

Delivery is at-least-once; the capture happens once, with no store written by hand
(docs/effects.md):

- the app's :class:`~rabbitq.effects.PostgresStore` keys each capture on its
  ``payment_id`` (one capture per payment, whatever the message ids): a duplicate is
  acked without calling the gateway, and two copies are never handled at once;
- the same key goes to the gateway as its **idempotency key**: the gateway's capture is
  outside our database, so a worker that dies after the capture but before its done
  mark runs the handler again, and the gateway answers that second call with the first
  capture's reference instead of capturing twice;
- the capture's row, the done mark and the ``payment.captured`` announcement (an outbox
  row) commit in one transaction (``ctx.transaction()``): recorded and announced once.

The default gateway is a :class:`SandboxGateway` that moves no money; pass a real
client to :func:`create_app`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Protocol
from uuid import UUID

import psycopg
from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field

from rabbitq import App, Context, Message, PermanentError, PublishError, RabbitqError, RetryPolicy
from rabbitq.crypto import Keyring
from rabbitq.effects import Outbox, PostgresStore

log = logging.getLogger("examples.payment_service")

# The examples' own exchange, apart from the tutorial's (and any app's) "rabbitq";
# the tests run the module-level apps on an exchange of their own through it.
EXCHANGE = os.environ.get("EXAMPLES_EXCHANGE", "examples")

# DEVELOPMENT ONLY: a published key protects nothing. Production sets $PAYMENTS_KEYS.
DEV_KEYS = "dev-2026=ZGV2ZWxvcG1lbnQtb25seS1rZXktcHVibGlzaGVkISE="
KEYS = Keyring.from_env("PAYMENTS_KEYS", default=DEV_KEYS)  # both apps below use it

CENT = Decimal("0.01")
MAX_AMOUNT = Decimal("1000000.00")  # larger captures go through a reviewed flow
_AMOUNT_TEXT = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")


def _amount_input(value: Any) -> Any:
    """Accept a Decimal, an int or a plain decimal string; refuse floats and exponents."""
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError('send the amount as a string such as "12.34": a JSON number is a float')
    if isinstance(value, str) and not _AMOUNT_TEXT.match(value):
        raise ValueError('amount must be written as digits and a decimal point, such as "12.34"')
    return value


# Validated as a Decimal (positive, at most 2 places), then written with exactly 2
# places, so "12.3" and Decimal("1.2E+1") travel as "12.30" and "12.00".
Amount = Annotated[
    Decimal,
    BeforeValidator(_amount_input),
    Field(gt=0, le=MAX_AMOUNT, decimal_places=2),
    AfterValidator(lambda amount: amount.quantize(CENT)),
]


class Currency(StrEnum):
    """ISO 4217 codes this service accepts; all have 2 minor units (cents)."""

    EUR = "EUR"
    USD = "USD"
    GBP = "GBP"
    CHF = "CHF"


def _now() -> datetime:
    return datetime.now(UTC)


class CapturePayment(Message, type="payment.capture"):
    """Capture an authorised payment."""

    payment_id: UUID
    amount: Amount
    currency: Currency
    requested_at: AwareDatetime = Field(default_factory=_now)  # a naive time is refused


class PaymentCaptured(Message, type="payment.captured"):
    """Announced once a capture is recorded (through the outbox)."""

    payment_id: UUID
    amount: Amount
    currency: Currency
    reference: str


# -- the gateway -----------------------------------------------------------------------


class PaymentDeclined(PermanentError):
    """The gateway declined the capture: dead-lettered, retrying cannot change it."""

    def __init__(self, code: str, text: str) -> None:
        self.code = code
        super().__init__(f"declined {code}: {text}")


class GatewayUnavailable(Exception):
    """The gateway could not be reached or answered 5xx: retried."""


class GatewayTimeout(GatewayUnavailable):
    """The gateway did not answer in time; the capture may have happened: retried with
    the same idempotency key, so it cannot happen twice."""


class PaymentGateway(Protocol):
    """What the service needs from a payment gateway's client."""

    async def capture(
        self, payment_id: UUID, amount: Decimal, currency: Currency, *, idempotency_key: str
    ) -> str:
        """Capture and return the gateway's reference.

        A second call with the same ``idempotency_key`` must return the first call's
        reference without capturing again (Stripe, Adyen and others do this).
        """
        ...


# Test amounts in the style of a gateway sandbox (Braintree's uses the same ranges).
DECLINED_AMOUNTS = (Decimal("2000.00"), Decimal("3000.00"))  # [low, high)
UNAVAILABLE_AMOUNTS = (Decimal("3000.00"), Decimal("3001.00"))


class SandboxGateway:
    """A gateway that moves no money. Amounts from 2000.00 to 2999.99 are declined, from
    3000.00 to 3000.99 the gateway is unavailable; everything else is captured."""

    def __init__(self) -> None:
        self.captures: dict[str, tuple[UUID, Decimal, Currency]] = {}  # by idempotency key
        self.calls = 0

    async def capture(
        self, payment_id: UUID, amount: Decimal, currency: Currency, *, idempotency_key: str
    ) -> str:
        self.calls += 1
        reference = f"cap_{idempotency_key}"
        if idempotency_key in self.captures:
            return reference  # the gateway's own idempotency: no second capture
        if DECLINED_AMOUNTS[0] <= amount < DECLINED_AMOUNTS[1]:
            raise PaymentDeclined("2001", "insufficient funds")
        if UNAVAILABLE_AMOUNTS[0] <= amount < UNAVAILABLE_AMOUNTS[1]:
            raise GatewayUnavailable("503 from the gateway: processor network unavailable")
        self.captures[idempotency_key] = (payment_id, amount, currency)
        return reference


# -- the service -----------------------------------------------------------------------

DEFAULT_DB = "postgresql://postgres@127.0.0.1:5432/rabbitq_examples"  # the examples' own
# Captures are retried less often than the app's default (1s, 10s, 1m, 10m), and not
# after 1 s: a gateway that failed needs time. The app declares the retry queues of the
# delays its handlers use, so there is no example-payments.retry.1s.
CAPTURE_RETRY = RetryPolicy(delays=(10, 60, 600))
# Above the gateway client's own timeout, so that a slow gateway shows up as its
# GatewayTimeout; this is the backstop for a call that hangs. It also bounds the
# idempotency lease: a worker killed mid-capture frees the payment 25 s later.
CAPTURE_TIMEOUT = 20.0


def captures_table(prefix: str) -> str:
    """The table of recorded captures. Amounts are ``numeric``: never a float."""
    return prefix + "captures"


async def create_tables(conn: psycopg.AsyncConnection[Any], prefix: str) -> None:
    """Create the captures table if it is missing (idempotent, safe in parallel)."""
    table = captures_table(prefix)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (table,))
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (payment_id uuid PRIMARY KEY,"
            " amount numeric(12, 2) NOT NULL, currency text NOT NULL,"
            " reference text NOT NULL, captured_at timestamptz NOT NULL)"
        )


def create_app(
    *,
    queue: str = "example-payments",
    exchange: str = EXCHANGE,
    url: str | None = None,
    db: str | None = None,
    prefix: str = "payments_",
    gateway: PaymentGateway | None = None,
    retry: RetryPolicy = CAPTURE_RETRY,
    timeout: float = CAPTURE_TIMEOUT,
    keys: Keyring | None = None,
) -> App:
    """The payment service on the database ``db`` (default ``$PAYMENTS_DB``, else the
    examples' own database), encrypted with ``keys`` (default ``$PAYMENTS_KEYS``, else
    the development key). Tests pass their own names, table prefix, gateway and timings."""
    dsn = db or os.environ.get("PAYMENTS_DB", DEFAULT_DB)
    # Quorum queues are replicated (Raft) and dead-letter at-least-once: a capture
    # request survives the loss of a broker node, and not even the broker's own
    # dead-lettering can drop one. Their x-delivery-limit (10) dead-letters a message
    # that keeps crashing its worker instead of looping for ever.
    app = App(
        queue=queue,
        exchange=exchange,
        url=url,
        prefetch=16,
        queue_type="quorum",
        # One pooled connection per handler in flight: each holds one for its transaction.
        idempotency=PostgresStore(dsn, prefix=prefix, pool_size=16),
        encryption=keys or KEYS,
    )
    Outbox(dsn, app=app, prefix=prefix)  # payment.captured, sent by `rabbitq outbox relay`
    client: PaymentGateway = gateway if gateway is not None else SandboxGateway()
    table = captures_table(prefix)
    tables_ready = False

    # The key is the payment, not the message: two messages asking to capture one payment
    # are one capture. (Without key=, it would be ctx.message_id.)
    @app.handler(CapturePayment, retry=retry, timeout=timeout, key=lambda m: m.payment_id)
    async def capture_payment(msg: CapturePayment, ctx: Context) -> None:
        nonlocal tables_ready
        # The gateway is outside our database: its own idempotency key makes a second
        # call (after a crash between the capture and the commit below) harmless.
        reference = await client.capture(
            msg.payment_id, msg.amount, msg.currency, idempotency_key=ctx.idempotency_key
        )
        async with ctx.transaction() as conn:  # the row, the done mark and the outbox row
            if not tables_ready:
                await create_tables(conn, prefix)
            await conn.execute(
                f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s)",
                (msg.payment_id, msg.amount, msg.currency.value, reference, _now()),
            )
            await ctx.publish(
                PaymentCaptured(
                    payment_id=msg.payment_id,
                    amount=msg.amount,
                    currency=msg.currency,
                    reference=reference,
                )
            )
        tables_ready = True  # committed
        log.info(
            "captured %s %s for payment %s as %s",
            msg.amount,
            msg.currency,
            msg.payment_id,
            reference,
        )

    return app


app = create_app()

# A service that consumes the announcement: the relay publishes ``payment.captured``
# mandatory, so until a queue is bound to it each outbox row waits (and the relay says
# so). ``rabbitq worker examples.payment_service:receipts`` (or ``rabbitq topology``) binds it.
# It reads the payment service's encrypted messages: it holds the same key ring.
receipts = App(queue="example-receipts", exchange=EXCHANGE, prefetch=16, encryption=KEYS)


@receipts.handler(PaymentCaptured)
async def record_receipt(msg: PaymentCaptured) -> None:
    """Log the receipt of a captured payment (a real service would e-mail it)."""
    log.info("receipt: %s %s for payment %s (%s)", msg.amount, msg.currency, msg.payment_id,
             msg.reference)  # fmt: skip


async def publish_samples(target: App = app) -> list[str]:
    """Publish a capture, a duplicate of it, a decline and a gateway outage."""
    ok = CapturePayment(payment_id=uuid.uuid4(), amount=Decimal("49.90"), currency=Currency.EUR)
    again = uuid.uuid4().hex
    async with target.publisher() as pub:
        return [
            await pub.publish(ok, message_id=again),
            await pub.publish(ok, message_id=again),  # a duplicate: captured once
            await pub.publish(
                CapturePayment(
                    payment_id=uuid.uuid4(), amount=Decimal("2500.00"), currency=Currency.USD
                )
            ),
            await pub.publish(
                CapturePayment(
                    payment_id=uuid.uuid4(), amount=Decimal("3000.00"), currency=Currency.GBP
                )
            ),
        ]


def main() -> int:
    """``python -m examples.payment_service``: publish the sample captures."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        ids = asyncio.run(publish_samples())
    except PublishError as exc:
        print(
            f"error: {exc}\n(start the worker first: rabbitq worker examples.payment_service:app)",
            file=sys.stderr,
        )
        return 1
    except RabbitqError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for what, mid in zip(("capture", "duplicate", "decline", "outage"), ids, strict=True):
        print(f"published payment.capture ({what}) message_id={mid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
