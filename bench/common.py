"""What every scenario shares: the broker URL, unique names, the benchmark message,
fast pre-publishing, and the clock.

Loopback only: the harness refuses a URL whose host is not 127.0.0.1 or localhost,
so it can never load someone else's broker by accident.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aio_pika
import orjson
from aio_pika.abc import AbstractChannel, AbstractRobustConnection

from rabbitq import App, Message, RetryPolicy
from rabbitq._amqp.topology import declare, retry_queue_name
from rabbitq.hooks import Hooks
from rabbitq.message import CONTENT_TYPE, encode


def build(message: Message, *, message_id: str | None = None) -> aio_pika.Message:
    """An ``aio_pika.Message`` for a typed message, as a hand-written aio-pika producer
    would build it (the baselines fill queues this way; rabbitq's own publisher hands
    pamqp properties to aiormq instead, see rabbitq._amqp.properties)."""
    return aio_pika.Message(
        body=encode(message),
        content_type=CONTENT_TYPE,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        type=message.type_name(),
        message_id=message_id or uuid.uuid4().hex,
        timestamp=datetime.now(UTC),
    )


DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
PREFILL_WINDOW = 1000

clock = time.perf_counter


class BenchJob(Message, type="bench.job"):
    """A typical ~200-byte typed message (an email job)."""

    n: int
    to: str
    subject: str
    body: str


class BenchBlob(Message, type="bench.blob"):
    """A 1 KiB message for the memory scenario."""

    n: int
    data: str


class BenchStamp(Message, type="bench.stamp"):
    """A message that carries its publish time (``perf_counter``) for latency."""

    n: int
    sent: float
    pad: str


def job(n: int) -> BenchJob:
    return BenchJob(
        n=n,
        to=f"user{n:06d}@example.com",
        subject="Your order has shipped",
        body="Hello, your order is on its way and should arrive in three to five days. "
        "Track it from your account page.",
    )


def blob(n: int) -> BenchBlob:
    return BenchBlob(n=n, data="x" * 1000)


def check_local(url: str) -> str:
    """``url`` if it points at this machine, else a ``SystemExit`` with the reason."""
    host = urlsplit(url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"bench: refusing to load {host!r}: the harness runs on loopback only")
    return url


def unique(prefix: str) -> str:
    """A queue name nobody else uses: ``bench.<prefix>.<hex>``."""
    return f"bench.{prefix}.{uuid.uuid4().hex[:10]}"


@dataclass(frozen=True)
class Config:
    """One harness run's sizes."""

    url: str
    n: int  # messages for consume (and the base for the others)
    rounds: int
    quick: bool

    @property
    def small(self) -> int:
        """A quarter of ``n`` (at least 50): publish, retry, memory."""
        return max(50, self.n // 4)


def bench_app(queue: str, *, prefetch: int = 256, delays: tuple[float, ...] = (60,)) -> App:
    """An app on its own queue and exchange (deleted by :func:`topology`), with the
    default handler time limit, as a user would have it."""
    return App(
        queue=queue, exchange=queue + ".x", prefetch=prefetch, retry=RetryPolicy(delays=delays)
    )


@contextlib.asynccontextmanager
async def connection(url: str, name: str) -> AsyncIterator[AbstractRobustConnection]:
    conn = await aio_pika.connect_robust(url, client_properties={"connection_name": name})
    try:
        yield conn
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def topology(url: str, app: App) -> AsyncIterator[AbstractRobustConnection]:
    """Declare ``app``'s queues for the block, then delete them and its exchange."""
    async with connection(url, "rabbitq bench setup") as conn:
        channel = await conn.channel()
        await declare(channel, app.topology())
        try:
            yield conn
        finally:
            await delete(channel, app)


async def delete(channel: AbstractChannel, app: App) -> None:
    """Delete ``app``'s queues and exchange: those its topology has now, and the retry
    queues of its policy's delays, which a worker of the same app with handlers declared
    (an app without handlers declares no retry queue)."""
    names = [spec.name for spec in app.topology().queues]
    names += [retry_queue_name(app.queue, ms) for ms in app.retry.delays_ms]
    for name in dict.fromkeys(names):
        with contextlib.suppress(Exception):
            await channel.queue_delete(name)
    with contextlib.suppress(Exception):
        await channel.exchange_delete(app.exchange)
    with contextlib.suppress(Exception):
        await channel.close()


async def prefill(conn: AbstractRobustConnection, queue: str, messages: list[Message]) -> None:
    """Publish ``messages`` (as rabbitq would: persistent, typed) straight to ``queue``,
    confirmed in pipelined windows. Not measured."""
    channel = await conn.channel(publisher_confirms=True)
    exchange = channel.default_exchange
    for start in range(0, len(messages), PREFILL_WINDOW):
        await asyncio.gather(
            *(
                exchange.publish(build(m), routing_key=queue)
                for m in messages[start : start + PREFILL_WINDOW]
            )
        )
    await channel.close()


async def wait_depth(conn: AbstractRobustConnection, queue: str, depth: int, timeout=60) -> None:
    """Wait until ``queue`` holds ``depth`` ready messages."""
    channel = await conn.channel()
    deadline = clock() + timeout
    try:
        while True:
            q = await channel.declare_queue(queue, passive=True)
            if q.declaration_result.message_count == depth:
                return
            if clock() > deadline:
                raise TimeoutError(f"{queue} did not reach depth {depth}")
            await asyncio.sleep(0.05)
    finally:
        await channel.close()


async def until(done: asyncio.Event, timeout: float, what: str) -> None:
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        raise TimeoutError(f"bench: {what} did not finish within {timeout:g}s") from None


def rate(count: int, first: float | None, last: float | None) -> float:
    """Messages per second between the first and the last event."""
    if first is None or last is None or last <= first:
        return float("nan")
    return count / (last - first)


def loads(body: bytes) -> Any:
    return orjson.loads(body)


Runner = Callable[[Config], Awaitable[dict[str, float]]]


class SettleClock(Hooks):
    """First delivery and ``n``-th success (as its ack is sent), from the worker's own
    hooks, with the process's CPU time at each."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self.cpu = [0.0, 0.0]
        self.done = asyncio.Event()

    def received(self, queue: str, type_name: str) -> None:
        if self.first is None:
            self.first, self.cpu[0] = clock(), time.process_time()

    def succeeded(self, queue: str, type_name: str, duration: float) -> None:
        # Called as the ack (or the multiple-ack that covers this delivery) is sent.
        self.count += 1
        if self.count == self.n:
            self.last, self.cpu[1] = clock(), time.process_time()
            self.done.set()


def spread(values: list[float]) -> str:
    """A figure's median and range as the tables print it: ``1,234 (1,000-1,400)``."""
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def run_scenario(
    doc: str | None, main_async: Callable[[str, int, int], Awaitable[Any]], *, n: int = 5000
) -> None:
    """The command line of a bench module that runs ``main_async(url, n, rounds)``:
    ``--n``, ``--rounds`` and ``--url`` (default ``$RABBITQ_URL``, else the local broker;
    loopback only), then the run's wall time on stderr."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=n)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default=os.environ.get("RABBITQ_URL", DEFAULT_URL))
    args = parser.parse_args()
    started = time.time()
    asyncio.run(main_async(check_local(args.url), args.n, args.rounds))
    print(f"\n({time.time() - started:.0f} s)", file=sys.stderr)
