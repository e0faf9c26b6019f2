"""A payment-capture service: consumes ``payment.capture`` and captures exactly once.

Run a worker from the repository root (it declares the quorum queues ``payments``,
``payments.retry.*`` and ``payments.dlq``)::

    rabbitq worker examples.payment_service:app

and, in another shell, publish the samples (a capture, the same message again, which
is recognised as a duplicate, a decline, which goes to ``payments.dlq`` at once, and a
gateway outage, which is retried in 10s, 1m and 10m before it is dead-lettered)::

    python -m examples.payment_service

or one capture by hand (the amount is a string: a JSON number is a binary float)::

    rabbitq publish examples.payment_service:app payment.capture \\
        '{"payment_id": "6f1c3a52-4a8e-4ab7-9d6e-2f5b8c1e9a10",
          "amount": "49.90", "currency": "EUR"}'

Delivery is at-least-once, so the handler is idempotent on the message's
``message_id`` in two layers: a :class:`CaptureStore` remembers what was captured (a
duplicate is acked without calling the gateway), and the same id is sent to the gateway
as its idempotency key, which covers a crash between the capture and the store write,
and two copies of one message handled at the same time.

The defaults are for trying it out: a :class:`MemoryStore` and a :class:`SandboxGateway`
that moves no money. Pass a :class:`SqliteStore` (or your database) and a real gateway
client to :func:`create_app`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Protocol
from uuid import UUID

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field

from rabbitq import App, Context, Message, PermanentError, PublishError, RabbitqError, RetryPolicy

log = logging.getLogger("examples.payment_service")

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


# -- the store of processed messages ---------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Capture:
    """A completed capture, keyed by the message_id that asked for it."""

    message_id: str
    payment_id: UUID
    amount: Decimal
    currency: Currency
    reference: str
    captured_at: datetime


class CaptureStore(Protocol):
    """Remembers which messages were captured."""

    def get(self, message_id: str) -> Capture | None:
        """The capture made for ``message_id``, if any."""
        ...

    def add(self, capture: Capture) -> bool:
        """Record ``capture``; False if its message_id was already recorded."""
        ...


class MemoryStore:
    """A :class:`CaptureStore` in a dict: for tests and trying things out."""

    def __init__(self) -> None:
        self.captures: dict[str, Capture] = {}

    def get(self, message_id: str) -> Capture | None:
        return self.captures.get(message_id)

    def add(self, capture: Capture) -> bool:
        if capture.message_id in self.captures:
            return False
        self.captures[capture.message_id] = capture
        return True


class SqliteStore:
    """A :class:`CaptureStore` in SQLite. Amounts are stored as text: never a float.

    Its calls are short local writes made from the event loop; a network database
    would want an async driver instead.
    """

    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None)  # autocommit
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS captures ("
            " message_id TEXT PRIMARY KEY, payment_id TEXT NOT NULL, amount TEXT NOT NULL,"
            " currency TEXT NOT NULL, reference TEXT NOT NULL, captured_at TEXT NOT NULL)"
        )

    def get(self, message_id: str) -> Capture | None:
        row = self._db.execute(
            "SELECT message_id, payment_id, amount, currency, reference, captured_at"
            " FROM captures WHERE message_id = ?",
            (message_id,),
        ).fetchone()
        if row is None:
            return None
        return Capture(
            message_id=row[0],
            payment_id=UUID(row[1]),
            amount=Decimal(row[2]),
            currency=Currency(row[3]),
            reference=row[4],
            captured_at=datetime.fromisoformat(row[5]),
        )

    def add(self, capture: Capture) -> bool:
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO captures VALUES (?, ?, ?, ?, ?, ?)",
            (
                capture.message_id,
                str(capture.payment_id),
                str(capture.amount),
                capture.currency.value,
                capture.reference,
                capture.captured_at.isoformat(),
            ),
        )
        return cursor.rowcount == 1

    def close(self) -> None:
        """Close the database."""
        self._db.close()


# -- the service -----------------------------------------------------------------------

# Captures are retried less often than the app's default (1s, 10s, 1m, 10m), and not
# after 1 s: a gateway that failed needs time. The delays are a subset of the default's,
# so the handler needs no retry queue of its own.
CAPTURE_RETRY = RetryPolicy(delays=(10, 60, 600))
# Above the gateway client's own timeout, so that a slow gateway shows up as its
# GatewayTimeout; this is the backstop for a call that hangs.
CAPTURE_TIMEOUT = 20.0


def create_app(
    *,
    queue: str = "payments",
    exchange: str = "rabbitq",
    url: str | None = None,
    store: CaptureStore | None = None,
    gateway: PaymentGateway | None = None,
    retry: RetryPolicy = CAPTURE_RETRY,
    timeout: float = CAPTURE_TIMEOUT,
) -> App:
    """The payment service. Tests pass their own names, store, gateway and timings."""
    # Quorum queues are replicated (Raft) and dead-letter at-least-once: a capture
    # request survives the loss of a broker node, and not even the broker's own
    # dead-lettering can drop one. They cost a little throughput, which payments
    # can afford. Their x-delivery-limit (10) dead-letters a message that keeps
    # crashing its worker instead of looping for ever.
    app = App(queue=queue, exchange=exchange, url=url, prefetch=16, queue_type="quorum")
    captures: CaptureStore = store if store is not None else MemoryStore()
    client: PaymentGateway = gateway if gateway is not None else SandboxGateway()

    @app.handler(CapturePayment, retry=retry, timeout=timeout)
    async def capture_payment(msg: CapturePayment, ctx: Context) -> None:
        # rabbitq's publisher always sets message_id. For another producer's message
        # without one, rabbitq derives an id from the body ("derived-..."); the payment
        # itself is the better key there (one capture per payment).
        key = ctx.message_id
        if key.startswith("derived-"):
            key = f"payment-{msg.payment_id}"
        if (done := captures.get(key)) is not None:
            log.info("message %s already captured as %s: duplicate ignored", key, done.reference)
            return
        reference = await client.capture(
            msg.payment_id, msg.amount, msg.currency, idempotency_key=key
        )
        captures.add(
            Capture(
                message_id=key,
                payment_id=msg.payment_id,
                amount=msg.amount,
                currency=msg.currency,
                reference=reference,
                captured_at=_now(),
            )
        )
        log.info(
            "captured %s %s for payment %s as %s",
            msg.amount,
            msg.currency,
            msg.payment_id,
            reference,
        )

    return app


app = create_app()


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
