"""``rabbitq demo``: a small email and payment service, run end to end on a real broker.

The demo declares its own App (queue and exchange ``rabbitq-demo``, so it never meets a
user's ``rabbitq`` exchange), runs a :class:`~rabbitq.Worker` for it in-process with
retry delays of 1 s and 3 s, publishes a scripted batch and tallies every outcome
through :class:`~rabbitq.hooks.Hooks` until the batch has settled: every message
handled or dead-lettered, and the main and retry queues empty.

The batch is deterministic, so its tally is known before anything runs: a message's
``fail_first`` field says how many attempts fail transiently, one card is always
declined (a :class:`~rabbitq.PermanentError`), one body is not JSON and one type has
no handler. Each run first purges the demo's own queues, so it can be run again and
again; :func:`cleanup` deletes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import logging
import os
import re
import socket
import time
import warnings
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

import aio_pika
import aiormq
import orjson
from aio_pika.abc import AbstractRobustConnection
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .app import App, Context
from .codec import CONTENT_TYPE
from .connection import START_HINT, connect
from .consumer import Worker
from .consumer import log as worker_log
from .errors import BrokerUnavailable, PermanentError, RabbitqError, TopologyMismatch
from .hooks import Hooks
from .message import Message
from .publisher import Publisher, confirmed
from .retry import EXHAUSTED, INVALID, PERMANENT, REASONS, UNKNOWN_TYPE, RetryPolicy
from .settings import redact_url
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
CONTAINER_IMAGE = "rabbitmq:3.13"

HANDLED = "handled"
Display = Literal["live", "plain", "none"]


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


def _special() -> list[Planned]:
    exhausted = "fails every attempt: DLQ, exhausted"
    return [
        Planned(
            message_id="email-busy-once",
            story="SMTP busy once, handled on attempt 2",
            retries=TIERS[:1],
            message=SendEmail(to="ana@example.org", subject="Your receipt", fail_first=1),
        ),
        Planned(
            message_id="pay-timeout-once",
            story="gateway timeout once, handled on attempt 2",
            retries=TIERS[:1],
            message=CapturePayment(
                order_id="ord-2001", amount=Decimal("49.90"), card=GOOD_CARD, fail_first=1
            ),
        ),
        Planned(
            message_id="email-busy-twice",
            story="SMTP busy twice, handled on attempt 3",
            retries=TIERS[:2],
            message=SendEmail(to="bo@example.net", subject="Password reset", fail_first=2),
        ),
        Planned(
            message_id="email-unreachable",
            story=exhausted,
            final=EXHAUSTED,
            retries=TIERS,
            message=SendEmail(to="ops@unreachable.example", subject="Report", fail_first=99),
        ),
        Planned(
            message_id="pay-gateway-down",
            story=exhausted,
            final=EXHAUSTED,
            retries=TIERS,
            message=CapturePayment(
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

    def as_dict(self) -> dict[str, Any]:
        """Plain data, with every tier and reason present (zero if none)."""
        return {
            "published": self.published,
            "handled": self.handled,
            "retried": {t: self.retried[t] for t in TIERS},
            "dead_lettered": {r: self.dead_lettered[r] for r in REASONS},
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


# "message pay-03 (demo.payment.capture) failed ...", "... dead-lettered to q.dlq (...)":
# the ids are readable and there is one DLQ, so the type and the DLQ's name go.
_WORKER_LINE = re.compile(r"^message (\S+) \([\w.-]+\) |(?<=dead-lettered) to \S+")


class _ToView(logging.Handler):
    """Hands the worker's log lines to the view instead of stderr, where they would
    tear the live table. The worker logs only redacted URLs, never the password."""

    def __init__(self, view: _View) -> None:
        super().__init__(logging.INFO)
        self.view = view

    def emit(self, record: logging.LogRecord) -> None:
        text = _WORKER_LINE.sub(lambda m: f"{m[1]} " if m[1] else "", record.getMessage())
        self.view.event(record.levelno, text)


@contextlib.contextmanager
def _worker_log_to(handler: logging.Handler) -> Iterator[None]:
    saved = worker_log.level, worker_log.propagate
    worker_log.addHandler(handler)
    worker_log.setLevel(logging.INFO)
    worker_log.propagate = False
    try:
        yield
    finally:
        worker_log.removeHandler(handler)
        worker_log.setLevel(saved[0])
        worker_log.propagate = saved[1]


# -- running it ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DemoSummary:
    """The outcome of a demo run: the tally against what was expected."""

    queue: str
    dlq: str
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
    view = _View(console, display, topology, tally, expected)
    specs = [(q.name, q.kind) for q in topology.queues]
    depths: tuple[QueueDepth, ...] = ()
    settled = False

    # Without a view, the worker logs as it always does.
    logs_to_view = _worker_log_to(_ToView(view)) if display != "none" else contextlib.nullcontext()
    connection = await _connect(url)
    try:
        await _prepare(connection, topology)
        if display != "none":
            print_intro(console, topology, batch, url)
        worker = Worker(app, url=url, hooks=tally, grace_period=5)
        with logs_to_view, view:
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


# -- a throwaway broker ---------------------------------------------------------------


def docker_available(timeout: float = 0.5) -> bool:
    """Whether ``--testcontainers`` could work: the package is installed and a Docker
    engine accepts connections (at ``$DOCKER_HOST``, else the usual socket)."""
    if importlib.util.find_spec("testcontainers") is None:
        return False
    # Docker's own setting, read here only to word a hint; the docker client reads it too.
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    scheme, _, where = host.partition("://")
    try:
        if scheme == "unix":
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(timeout)
                sock.connect(where)
        elif scheme == "tcp":
            name, _, port = where.rstrip("/").rpartition(":")
            with socket.create_connection((name, int(port)), timeout=timeout):
                pass
        else:  # ssh:// and the like: assume it works rather than try it
            return True
    except (OSError, ValueError):
        return False
    return True


def _container_class() -> Any:
    try:
        return importlib.import_module("testcontainers.community.rabbitmq").RabbitMqContainer
    except ImportError:
        pass
    try:
        with warnings.catch_warnings():  # the pre-4.10 location, deprecated since
            warnings.simplefilter("ignore", DeprecationWarning)
            return importlib.import_module("testcontainers.rabbitmq").RabbitMqContainer
    except ImportError as exc:
        raise BrokerUnavailable(
            "--testcontainers needs the testcontainers package: "
            "pip install 'testcontainers[rabbitmq]'"
        ) from exc


@contextlib.contextmanager
def throwaway_broker(image: str = CONTAINER_IMAGE) -> Iterator[str]:
    """Start a RabbitMQ container with testcontainers, yield its URL, then remove it."""
    container_class = _container_class()
    try:
        container = container_class(image)
        container.start()
    except Exception as exc:
        detail = (str(exc).splitlines() or [""])[0][:200] or type(exc).__name__
        raise BrokerUnavailable(
            f"--testcontainers could not start a RabbitMQ container: is Docker running? "
            f"({type(exc).__name__}: {detail})"
        ) from exc
    try:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(container.port)
        yield f"amqp://{container.username}:{container.password}@{host}:{port}/"
    finally:
        container.stop()


# -- showing it -----------------------------------------------------------------------


def print_intro(console: Console, topology: Topology, batch: list[Planned], url: str) -> None:
    """What the demo is about to do, one line per kind of message."""
    out = console.out
    out(
        f"rabbitq demo: an email and a payment handler on queue {topology.main.name!r} "
        f"at {redact_url(url)}",
        highlight=False,
    )
    out(
        f"Publishing {len(batch)} messages; a failed attempt is retried after "
        f"{', then '.join(TIERS)} ({DEMO_RETRY.attempts} attempts in all), then "
        f"dead-lettered to {topology.dlq.name!r}.",
        highlight=False,
    )
    stories: dict[str, list[str]] = {}
    for item in batch:
        stories.setdefault(item.story, []).append(item.message_id)
    for story, ids in stories.items():
        who = f"{len(ids)} ordinary emails and payments" if len(ids) > 2 else ", ".join(ids)
        out(f"  {who:<36}  {story}", highlight=False)
    out("")


class _View:
    """The live table (a terminal) or event and progress lines (logs) during the run."""

    def __init__(
        self, console: Console, display: Display, topology: Topology, tally: Tally, expected: Counts
    ) -> None:
        self.console = console
        self.display = display
        self.topology = topology
        self.tally = tally
        self.expected = expected
        self.events: deque[Text] = deque(maxlen=8)
        self.depths: tuple[QueueDepth, ...] = ()
        self.live: Live | None = None
        self._started = time.monotonic()
        self._last_line = ""
        self._last_line_at = -1.0

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def __enter__(self) -> _View:
        if self.display == "live":
            self.live = Live(self.render(), console=self.console, refresh_per_second=8)
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self.render())
            self.live.stop()
        elif self.display == "plain":
            self._progress(final=True)

    def event(self, level: int, text: str) -> None:
        line = f"{self.elapsed():6.1f}s  {text}"
        if self.display == "plain":
            self.console.out(line, highlight=False)
        elif self.display == "live":
            style = "yellow" if "retrying in" in text else "red" if level >= 30 else "dim"
            self.events.append(Text(line, style=style, no_wrap=True, overflow="ellipsis"))

    def update(self, depths: tuple[QueueDepth, ...]) -> None:
        self.depths = depths
        if self.live is not None:
            self.live.update(self.render())
        elif self.display == "plain":
            self._progress(final=False)

    def _waiting(self) -> str:
        main = self.topology.main.name
        return ", ".join(
            f"{'main' if d.kind == 'main' else d.name.removeprefix(main + '.')} {d.messages}"
            for d in self.depths
        )

    def render(self) -> RenderableType:
        got, want = self.tally.counts, self.expected
        rows = [
            ("published", got.published, want.published, ""),
            ("handled", got.handled, want.handled, "green"),
            *((f"retried, {t} tier", got.retried[t], want.retried[t], "yellow") for t in TIERS),
            *(
                (f"dead-lettered, {r}", got.dead_lettered[r], want.dead_lettered[r], "red")
                for r in REASONS
            ),
        ]
        title = f"rabbitq demo: queue {self.topology.main.name}, {self.elapsed():.1f} s"
        table = Table(title=title)
        table.add_column("outcome")
        table.add_column("so far", justify="right")
        table.add_column("expected", justify="right")
        for label, n, total, style in rows:
            table.add_row(Text(label, style=style), str(n), f"{total}{' ✓' if n == total else ''}")
        running = self.tally.in_flight
        waiting = f"waiting in queues: {self._waiting() or '-'}; handlers running: {running}"
        return Group(table, Text(waiting, style="dim"), Text(""), *self.events)

    def _progress(self, *, final: bool) -> None:
        got, want = self.tally.counts, self.expected
        tiers = ", ".join(f"{t} {got.retried[t]}/{want.retried[t]}" for t in TIERS)
        line = (
            f"handled {got.handled}/{want.handled}, retried {tiers}, dead-lettered "
            f"{got.dead_lettered.total()}/{want.dead_lettered.total()}; "
            f"waiting in queues: {self._waiting() or '-'}"
        )
        now = self.elapsed()
        if final or (line != self._last_line and now - self._last_line_at >= 1.0):
            self.console.out(f"{now:6.1f}s  {line}", highlight=False)
            self._last_line, self._last_line_at = line, now


def print_summary(
    console: Console, summary: DemoSummary, *, next_steps: bool = True, url_given: bool = False
) -> None:
    """The final tally and where to look next.

    ``url_given``: the broker was named with ``--url``, which the next commands need too.
    """
    got, out = summary.counts, console.out
    out("")
    if summary.settled:
        out(
            f"Settled in {summary.seconds:.1f} s: all {got.published} messages were handled "
            f"or dead-lettered.",
            highlight=False,
        )
    else:
        out(f"Not settled after {summary.seconds:.0f} s.", highlight=False)
    tiers = ", ".join(f"{t} tier: {got.retried[t]}" for t in TIERS)
    reasons = ", ".join(f"{r}: {got.dead_lettered[r]}" for r in REASONS)
    out(f"  handled         {got.handled:>4}", highlight=False)
    out(f"  retried         {got.retried.total():>4}   ({tiers})", highlight=False)
    out(f"  dead-lettered   {got.dead_lettered.total():>4}   ({reasons})", highlight=False)
    if not next_steps:
        out("The throwaway broker is gone, and its queues with it.")
        return
    queue = summary.queue
    delays = " ".join(f"--delay {d:g}" for d in DEMO_RETRY.delays)
    steps = [
        (f"rabbitq stats {queue} {delays}", "depths of the main, retry and DLQ queues"),
        (f"rabbitq dlq list {queue}", "the DLQ tool: list, show and replay what failed"),
        ("rabbitq demo --cleanup", "delete the demo's queues and exchange"),
    ]
    out("")
    out(
        f"The dead-lettered messages wait in {summary.dlq!r}, each with its reason and error.",
        highlight=False,
    )
    out("Where to look next" + (" (add the same --url):" if url_given else ":"), highlight=False)
    width = max(len(cmd) for cmd, _ in steps)
    for cmd, why in steps:
        out(f"  {cmd:<{width}}   {why}", highlight=False)
