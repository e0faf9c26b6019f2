"""``rabbitq demo``: a small email and payment service, run end to end on a real broker.

The demo declares its own App (queue and exchange ``rabbitq-demo``, so it never meets a
user's ``rabbitq`` exchange), runs a :class:`~rabbitq.Worker` for it in-process with
retry delays of 1 s and 3 s, publishes a scripted batch and tallies every outcome
through :class:`~rabbitq.hooks.Hooks` until the batch has settled: every message
handled or dead-lettered, and the main and retry queues empty. What it shows while
it runs, and the intro and summary around it, are :mod:`rabbitq.demo_view`'s.

The batch is deterministic, so its tally is known before anything runs: a message's
``fail_first`` field says how many attempts fail transiently, one card is always
declined (a :class:`~rabbitq.PermanentError`), one body is not JSON and one type has
no handler. Each run first purges the demo's own queues, so it can be run again and
again; :func:`cleanup` deletes them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import aio_pika
import aiormq
import orjson
from aio_pika.abc import AbstractRobustConnection
from rich.console import Console

from .app import App, Context
from .codec import CONTENT_TYPE
from .connection import START_HINT, connect
from .consumer import Worker
from .containers import docker_available
from .demo_view import Display as Display  # re-exported: the CLI takes it from here
from .demo_view import View, print_intro
from .demo_view import print_summary as print_summary  # re-exported, as Display
from .errors import BrokerUnavailable, PermanentError, RabbitqError, TopologyMismatch
from .hooks import Hooks
from .message import Message
from .publisher import Publisher, confirmed
from .retry import EXHAUSTED, INVALID, PERMANENT, REASONS, UNKNOWN_TYPE, RetryPolicy
from .topology import QueueDepth, Topology, declare, delay_label, queue_depths

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


class Tally(Hooks):
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


async def _connect(url: str) -> AbstractRobustConnection:
    try:
        return await connect(url, name="rabbitq demo")
    except BrokerUnavailable as exc:
        if START_HINT in str(exc) and docker_available():
            raise BrokerUnavailable(
                f"{exc}, or run a throwaway one with 'rabbitq demo --testcontainers'"
            ) from exc
        raise


async def _prepare(connection: AbstractRobustConnection, topology: Topology) -> None:
    """Refuse to share the queue with a running consumer, declare, and purge what an
    earlier run left behind (the demo's own queues only)."""
    [main] = await queue_depths(connection, [(topology.main.name, "main")])
    if main.consumers:
        raise RabbitqError(
            f"queue {main.name!r} already has {main.consumers} consumer(s): another "
            f"'rabbitq demo' (or a worker) is using it; wait for it to finish"
        )
    channel = await connection.channel()
    try:
        try:
            await declare(channel, topology)
        except TopologyMismatch as exc:
            raise RabbitqError(
                f"the demo's {exc.kind} {exc.name!r} exists with a different {exc.argument!r} "
                f"({exc.detail}); delete the demo's queues with 'rabbitq demo --cleanup' "
                f"and run it again"
            ) from exc
        for spec in topology.queues:
            await (await channel.get_queue(spec.name)).purge()
    finally:
        if not channel.is_closed:
            await channel.close()


async def _publish(
    connection: AbstractRobustConnection, app: App, batch: list[Planned], counts: Counts
) -> None:
    async with Publisher(app, url=app.resolved_url(), connection=connection) as pub:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        try:
            exchange = await channel.get_exchange(app.exchange)

            async def one(item: Planned) -> None:
                if item.message is not None:
                    await pub.publish(item.message, message_id=item.message_id)
                else:
                    raw = aio_pika.Message(
                        body=item.raw,
                        content_type=CONTENT_TYPE,
                        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        type=item.raw_type,
                        message_id=item.message_id,
                    )
                    if item.to_queue:
                        await confirmed(channel.default_exchange, raw, app.queue)
                    else:
                        await confirmed(exchange, raw, item.raw_type)
                counts.published += 1

            await asyncio.gather(*(one(item) for item in batch))
        finally:
            await channel.close()


async def run_demo(
    url: str,
    *,
    console: Console | None = None,
    display: Display = "plain",
    count: int = DEFAULT_COUNT,
    timeout: float = DEFAULT_TIMEOUT,
    queue: str = DEMO_QUEUE,
    exchange: str = DEMO_EXCHANGE,
    work_time: float = WORK_TIME,
) -> DemoSummary:
    """Run the demo against the broker at ``url`` and return its tally.

    ``display`` is ``live`` (a table that updates in place, for a terminal), ``plain``
    (a line per event and progress lines, for logs) or ``none``.
    """
    console = console or Console()
    app = build_app(queue=queue, exchange=exchange, url=url, work_time=work_time)
    topology = app.topology()
    batch = plan_batch(count)
    expected = expected_counts(batch)
    tally = Tally(queue)
    view = View(console, display, topology, tally, expected)
    specs = [(q.name, q.kind) for q in topology.queues]
    depths: tuple[QueueDepth, ...] = ()
    settled = False

    connection = await _connect(url)
    try:
        await _prepare(connection, topology)
        if display != "none":
            print_intro(console, app, batch, url)
        worker = Worker(app, url=url, hooks=tally, grace_period=5)
        with view.worker_logs(), view:
            task = asyncio.create_task(worker.run())
            try:
                await _until_ready(worker, task)
                await _publish(connection, app, batch, tally.counts)
                while not settled and view.elapsed() <= timeout:
                    await asyncio.sleep(0.25)
                    depths = tuple(await queue_depths(connection, specs))
                    view.update(depths)
                    drained = all(d.messages == 0 for d in depths if d.kind != "dlq")
                    settled = drained and tally.counts.settled >= expected.settled
            finally:
                worker.stop()
                await task
    except (aiormq.exceptions.AMQPError, ConnectionError) as exc:
        raise BrokerUnavailable(
            f"lost the connection to RabbitMQ during the demo ({type(exc).__name__}: {exc})"
        ) from exc
    finally:
        await connection.close()
    return DemoSummary(
        queue=queue,
        dlq=topology.dlq.name,
        retry=app.retry,
        counts=tally.counts,
        expected=expected,
        settled=settled,
        seconds=view.elapsed(),
        depths=depths,
    )


async def _until_ready(worker: Worker, task: asyncio.Task[None]) -> None:
    ready = asyncio.create_task(worker.ready.wait())
    done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED, timeout=30)
    if ready not in done:
        ready.cancel()
    if task in done:
        task.result()  # raises the worker's start-up error
    if ready not in done:
        raise BrokerUnavailable("the demo's worker did not start consuming within 30 s")


@dataclass(frozen=True, kw_only=True)
class CleanupResult:
    """What :func:`cleanup` deleted: the queues that existed (with their depth)."""

    queues: tuple[QueueDepth, ...]
    exchange: str

    @property
    def messages(self) -> int:
        """Messages that were in the deleted queues."""
        return sum(q.messages for q in self.queues)


async def cleanup(
    url: str, *, queue: str = DEMO_QUEUE, exchange: str = DEMO_EXCHANGE
) -> CleanupResult:
    """Delete the demo's queues (main, retry, DLQ) and its exchange. Idempotent."""
    topology = build_app(queue=queue, exchange=exchange).topology()
    connection = await _connect(url)
    try:
        depths = await queue_depths(connection, [(q.name, q.kind) for q in topology.queues])
        if depths[0].consumers:
            raise RabbitqError(
                f"queue {queue!r} has {depths[0].consumers} consumer(s): a demo is running; "
                f"let it finish before cleaning up"
            )
        channel = await connection.channel()
        try:
            for depth in depths:
                if depth.exists:
                    await channel.queue_delete(depth.name)
            await channel.exchange_delete(exchange)  # a no-op if it does not exist
        finally:
            await channel.close()
    finally:
        await connection.close()
    return CleanupResult(queues=tuple(d for d in depths if d.exists), exchange=exchange)
