"""The demo's scenario, as data: its app, the scripted batch, and the tally it must reach.

The batch is deterministic, so its tally is known before anything runs: a message's
``fail_first`` field says how many attempts fail transiently, one card is always
declined (a :class:`~rabbitq.PermanentError`), one body is not JSON and one type has
no handler. :mod:`rabbitq.demo.run` runs it; :mod:`rabbitq.demo.view` shows it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import orjson

from .._amqp.topology import QueueDepth, delay_label
from ..app import App
from ..context import Context
from ..errors import PermanentError
from ..hooks import Hooks
from ..message import Message
from ..retry import EXHAUSTED, INVALID, PERMANENT, REASONS, UNKNOWN_TYPE, RetryPolicy

DEMO_QUEUE = "rabbitq-demo"
DEMO_EXCHANGE = "rabbitq-demo"
DEMO_RETRY = RetryPolicy(delays=(1, 3))
TIERS = tuple(delay_label(ms) for ms in DEMO_RETRY.delays_ms)  # ("1s", "3s")
DEFAULT_COUNT = 16  # ordinary messages, handled at the first attempt
MAX_COUNT = 200  # with the prefetch and work time below, still well under a minute
DEFAULT_TIMEOUT = 60.0
# A small prefetch and a little simulated work, so that progress can be watched.
DEMO_PREFETCH = 4
WORK_TIME = 0.15

HANDLED = "handled"


# -- the demo service -------------------------------------------------------------


class SendEmail(Message, type="demo.email.send"):
    """Send one email. ``fail_first``: this many attempts fail as if SMTP were busy."""

    to: str
    subject: str
    fail_first: int = 0


class CapturePayment(Message, type="demo.payment.capture"):
    """Capture a card payment. ``fail_first``: this many attempts time out first."""

    order_id: str
    amount: Decimal
    currency: str = "EUR"
    card: str
    fail_first: int = 0


class SmtpBusy(Exception):
    """The mail server asked us to try again later (transient)."""


class GatewayTimeout(Exception):
    """The payment gateway did not answer in time (transient)."""


class CardDeclined(PermanentError):
    """The card was declined: retrying cannot help, so it is dead-lettered at once."""


GOOD_CARD = "4242424242424242"
DECLINED_CARD = "4000000000000002"
UNKNOWN_TYPE_NAME = "demo.sms.send"


def build_app(
    *,
    queue: str = DEMO_QUEUE,
    exchange: str = DEMO_EXCHANGE,
    url: str | None = None,
    work_time: float = WORK_TIME,
) -> App:
    """The demo's App: an async email handler and a sync payment handler."""
    app = App(
        queue=queue,
        exchange=exchange,
        url=url,
        prefetch=DEMO_PREFETCH,
        retry=DEMO_RETRY,
        timeout=10,
    )

    @app.handler(SendEmail)
    async def send_email(msg: SendEmail, ctx: Context) -> None:
        await asyncio.sleep(work_time)
        if ctx.attempt <= msg.fail_first:
            raise SmtpBusy(f"421 mail.{msg.to.rpartition('@')[2]} is busy, try again later")

    @app.handler(CapturePayment)
    def capture_payment(msg: CapturePayment, ctx: Context) -> None:
        time.sleep(work_time)  # a sync handler: it runs in the worker's thread pool
        if msg.card == DECLINED_CARD:
            raise CardDeclined(
                f"card ending {msg.card[-4:]} declined ({msg.amount} {msg.currency})"
            )
        if ctx.attempt <= msg.fail_first:
            raise GatewayTimeout("the payment gateway did not answer within 5 s")

    return app


# -- the batch and its expected outcome ---------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Planned:
    """One message of the batch and what is meant to happen to it.

    A ``raw`` body (poison) is published as it is, with ``raw_type`` as its type; a
    ``to_queue`` one goes straight to the queue through the default exchange.
    ``retries`` are the tiers it waits in; ``final`` is ``handled`` or a DLQ reason.
    """

    message_id: str
    story: str
    final: str = HANDLED
    retries: tuple[str, ...] = ()
    message: Message | None = None
    raw: bytes = b""
    raw_type: str = ""
    to_queue: bool = False

    @property
    def type_name(self) -> str:
        """The message type it is published as."""
        return self.message.type_name() if self.message is not None else self.raw_type


def _ordinary(i: int) -> Planned:
    n = (i + 1) // 2
    if i % 2:
        email = SendEmail(to=f"user{n}@example.com", subject=f"Welcome #{n}")
        return Planned(message_id=f"email-{n:02d}", story="handled at once", message=email)
    amount = Decimal(f"{10 + (n * 7) % 90}.{(n * 37) % 100:02d}")
    payment = CapturePayment(order_id=f"ord-{1000 + n}", amount=amount, card=GOOD_CARD)
    return Planned(message_id=f"pay-{n:02d}", story="handled at once", message=payment)


def _failing_first(message_id: str, story: str, message: SendEmail | CapturePayment) -> Planned:
    """A message whose first ``fail_first`` attempts fail transiently: it waits in that
    many tiers, then is handled, or dead-lettered as exhausted if no attempt is left."""
    fails = message.fail_first
    final = HANDLED if fails < DEMO_RETRY.attempts else EXHAUSTED
    return Planned(
        message_id=message_id, story=story, final=final, retries=TIERS[:fails], message=message
    )


def _special() -> list[Planned]:
    exhausted = "fails every attempt: DLQ, exhausted"
    return [
        _failing_first(
            "email-busy-once",
            "SMTP busy once, handled on attempt 2",
            SendEmail(to="ana@example.org", subject="Your receipt", fail_first=1),
        ),
        _failing_first(
            "pay-timeout-once",
            "gateway timeout once, handled on attempt 2",
            CapturePayment(
                order_id="ord-2001", amount=Decimal("49.90"), card=GOOD_CARD, fail_first=1
            ),
        ),
        _failing_first(
            "email-busy-twice",
            "SMTP busy twice, handled on attempt 3",
            SendEmail(to="bo@example.net", subject="Password reset", fail_first=2),
        ),
        _failing_first(
            "email-unreachable",
            exhausted,
            SendEmail(to="ops@unreachable.example", subject="Report", fail_first=99),
        ),
        _failing_first(
            "pay-gateway-down",
            exhausted,
            CapturePayment(
                order_id="ord-2002", amount=Decimal("120.00"), card=GOOD_CARD, fail_first=99
            ),
        ),
        Planned(
            message_id="pay-declined",
            story="card declined (a PermanentError): DLQ at once, permanent",
            final=PERMANENT,
            message=CapturePayment(
                order_id="ord-2003", amount=Decimal("15.00"), card=DECLINED_CARD
            ),
        ),
        Planned(
            message_id="pay-poison",
            story="poison, the body is not JSON: DLQ at once, invalid",
            final=INVALID,
            raw=b'{"order_id": "ord-2004", "amount": "9.99", "card": ',
            raw_type=CapturePayment.type_name(),
        ),
        Planned(
            message_id="sms-unknown",
            story=f"no handler for type {UNKNOWN_TYPE_NAME}: DLQ at once, unknown-type",
            final=UNKNOWN_TYPE,
            raw=orjson.dumps({"to": "+491511234567", "text": "Your code is 1234"}),
            raw_type=UNKNOWN_TYPE_NAME,
            to_queue=True,  # the exchange has no binding for it: it would be unroutable
        ),
    ]


def plan_batch(count: int = DEFAULT_COUNT) -> list[Planned]:
    """The scripted batch: ``count`` ordinary messages around one of each kind of failure."""
    ordinary = [_ordinary(i) for i in range(1, count + 1)]
    half = len(ordinary) // 2
    return ordinary[:half] + _special() + ordinary[half:]


@dataclass(kw_only=True)
class Counts:
    """Messages published, handled, retried (per tier) and dead-lettered (per reason).

    A retry is counted each time a message goes to a retry queue.
    """

    published: int = 0
    handled: int = 0
    retried: Counter[str] = field(default_factory=Counter)
    dead_lettered: Counter[str] = field(default_factory=Counter)

    @property
    def settled(self) -> int:
        """Messages that reached a final outcome (handled or dead-lettered)."""
        return self.handled + self.dead_lettered.total()

    def per_tier(self) -> dict[str, int]:
        """Retries per tier, every tier present (zero if none), shortest delay first."""
        return {t: self.retried[t] for t in TIERS}

    def per_reason(self) -> dict[str, int]:
        """Dead letters per reason, every reason present (zero if none), in REASONS order."""
        return {r: self.dead_lettered[r] for r in REASONS}

    def as_dict(self) -> dict[str, Any]:
        """Plain data, with every tier and reason present (zero if none)."""
        return {
            "published": self.published,
            "handled": self.handled,
            "retried": self.per_tier(),
            "dead_lettered": self.per_reason(),
        }


def expected_counts(batch: list[Planned]) -> Counts:
    """What the tally must be once ``batch`` has settled."""
    counts = Counts(published=len(batch))
    for item in batch:
        counts.retried.update(item.retries)
        if item.final == HANDLED:
            counts.handled += 1
        else:
            counts.dead_lettered[item.final] += 1
    return counts


# -- observing the worker -----------------------------------------------------------


class DemoTally(Hooks):
    """Worker hooks that count the outcomes of one queue's deliveries."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.counts = Counts()
        self.in_flight = 0

    def succeeded(self, queue: str, type_name: str, duration: float) -> None:
        if queue == self.queue:
            self.counts.handled += 1

    def retried(self, queue: str, type_name: str, delay: str, duration: float) -> None:
        if queue == self.queue:
            self.counts.retried[delay] += 1

    def dead_lettered(self, queue: str, type_name: str, reason: str, duration: float) -> None:
        if queue == self.queue:
            self.counts.dead_lettered[reason] += 1

    def handler_started(self, queue: str) -> None:
        self.in_flight += 1

    def handler_finished(self, queue: str) -> None:
        self.in_flight -= 1


# -- running it ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DemoSummary:
    """The outcome of a demo run: the tally against what was expected, and where the
    messages were left (the queue, its DLQ, and the retry delays that name the retry
    queues)."""

    queue: str
    dlq: str
    retry: RetryPolicy
    counts: Counts
    expected: Counts
    settled: bool
    seconds: float
    depths: tuple[QueueDepth, ...] = ()

    @property
    def ok(self) -> bool:
        """Settled, and every count is the expected one."""
        return self.settled and self.counts == self.expected

    @property
    def problem(self) -> str | None:
        """Why the run is not :attr:`ok`, in one line."""
        if not self.settled:
            waiting = ", ".join(f"{d.name} {d.messages}" for d in self.depths if d.kind != "dlq")
            return (
                f"the demo did not settle within {self.seconds:.0f} s: {self.counts.settled} "
                f"of {self.expected.published} messages reached a final outcome (waiting: "
                f"{waiting or 'unknown'}); is something else consuming {self.queue!r}?"
            )
        if self.counts != self.expected:
            return (
                f"the tally differs from the expected one: got {self.counts.as_dict()}, "
                f"expected {self.expected.as_dict()}"
            )
        return None

    def as_dict(self) -> dict[str, Any]:
        """For ``--json``."""
        return {
            "ok": self.ok,
            "settled": self.settled,
            "seconds": round(self.seconds, 2),
            "queue": self.queue,
            "dlq": self.dlq,
            **self.counts.as_dict(),
            "expected": self.expected.as_dict(),
        }
