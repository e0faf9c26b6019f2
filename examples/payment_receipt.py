"""A payment of several line items, captured in parallel, and one receipt email once
every line is captured: a chord (docs/workflows.md).

It needs Redis (``$RECEIPTS_REDIS``, default ``redis://localhost:6379/0``), where the
lines are counted and their results kept. Run a worker from the repository root::

    rabbitq worker examples.payment_receipt:app

and, in another shell, pay for three items, then see that it worked with the
``rabbitq status`` command the script prints::

    python -m examples.payment_receipt
    rabbitq status examples.payment_receipt:app payment-<id>

Each line is captured by its own message, in parallel (retried if the gateway is down,
with the message id as the gateway's idempotency key, so a retry never captures twice).
When the last line succeeds, the worker that handled it publishes the ``SendReceipt``
callback, once, which reads every line's capture through ``ctx.chord_results()`` and
sends one email. A line that is dead-lettered (the card declined) sends one
``PaymentFailed`` instead, and the receipt waits: replaying the line from the DLQ
(``rabbitq dlq replay example-payment-lines``) completes it. The defaults
(:class:`SandboxGateway`, :class:`SandboxMailer`) call nothing and keep what they did in
memory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from decimal import Decimal
from typing import Any, Protocol

from rabbitq import App, Context, Message, PermanentError, RetryPolicy, chord
from rabbitq.effects import RedisStore

log = logging.getLogger("examples.payment_receipt")
REDIS = os.environ.get("RECEIPTS_REDIS", "redis://localhost:6379/0")


class CaptureLine(Message, type="payment.line.capture"):
    payment_id: uuid.UUID
    line: int
    sku: str
    amount: Decimal


class SendReceipt(Message, type="payment.receipt.send"):
    payment_id: uuid.UUID
    email: str


class PaymentFailed(Message, type="payment.failed"):
    payment_id: uuid.UUID
    email: str


class Declined(PermanentError):
    """The card was declined: retrying cannot help."""


class Gateway(Protocol):
    async def capture(self, amount: Decimal, *, idempotency_key: str) -> str: ...


class Mailer(Protocol):
    async def send(self, to: str, subject: str, body: str, *, idempotency_key: str) -> None: ...


class SandboxGateway:
    """Captures nothing: one reference per idempotency key. An amount of 13.13 declines."""

    def __init__(self) -> None:
        self.captured: dict[str, Decimal] = {}

    async def capture(self, amount: Decimal, *, idempotency_key: str) -> str:
        if amount == Decimal("13.13"):
            raise Declined(f"card declined for {amount}")
        self.captured.setdefault(idempotency_key, amount)
        return f"ref-{idempotency_key[:8]}"


class SandboxMailer:
    """Sends nothing: keeps each email by idempotency key."""

    def __init__(self) -> None:
        self.sent: dict[str, tuple[str, str, str]] = {}

    async def send(self, to: str, subject: str, body: str, *, idempotency_key: str) -> None:
        self.sent.setdefault(idempotency_key, (to, subject, body))


def create_app(
    *,
    queue: str = "example-payment-lines",
    exchange: str = os.environ.get("EXAMPLES_EXCHANGE", "examples"),
    url: str | None = None,
    store: RedisStore | None = None,
    gateway: Gateway | None = None,
    mailer: Mailer | None = None,
) -> App:
    """The service. Tests pass their own names, store and sandboxes."""
    store = store or RedisStore(REDIS, key_prefix="example-receipts:idem:")
    app = App(
        queue=queue,
        exchange=exchange,
        url=url,
        retry=RetryPolicy(delays=(1, 10, 60)),
        idempotency=store,  # each capture and each receipt once
        status=store,  # where the chord's lines are counted and their results kept
    )
    pay = gateway or SandboxGateway()
    mail = mailer or SandboxMailer()

    @app.handler(CaptureLine, timeout=30)
    async def capture_line(msg: CaptureLine, ctx: Context) -> dict[str, Any]:
        reference = await pay.capture(msg.amount, idempotency_key=ctx.idempotency_key)
        return {"sku": msg.sku, "amount": str(msg.amount), "reference": reference}

    @app.handler(SendReceipt, timeout=30)
    async def send_receipt(msg: SendReceipt, ctx: Context) -> None:
        lines = await ctx.chord_results()  # every line's result, in order
        total = sum(Decimal(line["amount"]) for line in lines)
        body = "\n".join(f"{x['sku']}: {x['amount']} ({x['reference']})" for x in lines)
        await mail.send(
            msg.email,
            f"Your receipt: {total}",
            f"{body}\ntotal: {total}",
            idempotency_key=ctx.idempotency_key,
        )
        log.info("receipt for payment %s sent to %s", msg.payment_id, msg.email)

    @app.handler(PaymentFailed, timeout=30)
    async def payment_failed(msg: PaymentFailed, ctx: Context) -> None:
        await mail.send(
            msg.email,
            "Your payment did not go through",
            "One of the items could not be charged; nothing else will be sent.",
            idempotency_key=ctx.idempotency_key,
        )

    return app


app = create_app()


async def pay_for(
    app: App, payment_id: uuid.UUID, email: str, items: list[tuple[str, Decimal]]
) -> str:
    """Capture every item in parallel, then send one receipt; return the chord's id
    (derived from the payment, so paying the same payment again is the same chord)."""
    lines = [
        CaptureLine(payment_id=payment_id, line=i, sku=sku, amount=amount)
        for i, (sku, amount) in enumerate(items)
    ]
    workflow = chord(
        lines,
        then=SendReceipt(payment_id=payment_id, email=email),
        on_failure=PaymentFailed(payment_id=payment_id, email=email),
        id=f"payment-{payment_id}",
    )
    async with app.publisher() as pub:
        return await pub.publish(workflow)


async def main(service: App = app, loaded_as: str = "examples.payment_receipt:app") -> str:
    """Pay for three items; print the chord's id and the command that shows its progress."""
    items = [("book", Decimal("12.50")), ("pen", Decimal("2.20")), ("lamp", Decimal("30.00"))]
    gid = await pay_for(service, uuid.uuid4(), "ada@example.com", items)
    print(f"payment {gid}: {len(items)} lines published; the receipt follows the last")
    print(f"its progress, lines and receipt: rabbitq status {loaded_as} {gid}")
    return gid


if __name__ == "__main__":
    asyncio.run(main())
