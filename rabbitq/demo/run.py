"""``rabbitq demo``: a small email and payment service, run end to end on a real broker.

The demo declares its own App (queue and exchange ``rabbitq-demo``, so it never meets a
user's ``rabbitq`` exchange), runs a :class:`~rabbitq.Worker` for it in-process with
retry delays of 1 s and 3 s, publishes the scripted batch of
:mod:`rabbitq.demo.scenario` and tallies every outcome through
:class:`~rabbitq.hooks.Hooks` until the batch has settled: every message handled or
dead-lettered, and the main and retry queues empty. What it shows while it runs, and
the intro and summary around it, are :mod:`rabbitq.demo.view`'s. Each run first
purges the demo's own queues, so it can be run again and again; :func:`cleanup`
deletes them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiormq
from aio_pika.abc import AbstractRobustConnection
from rich.console import Console

from .._amqp import properties
from .._amqp.confirm import send_confirmed
from .._amqp.connection import START_HINT, connect
from .._amqp.publisher import Publisher
from .._amqp.topology import QueueDepth, Topology, declare, queue_depths
from .._ops.containers import docker_available
from .._ops.run import WorkerSpec, worker_for
from .._worker.partitioned import AnyWorker
from ..app import App
from ..errors import BrokerUnavailable, RabbitqError, TopologyMismatch
from ..settings import TLS
from .scenario import (
    DEFAULT_COUNT,
    DEFAULT_TIMEOUT,
    DEMO_EXCHANGE,
    DEMO_QUEUE,
    WORK_TIME,
    Counts,
    DemoSummary,
    DemoTally,
    Planned,
    build_app,
    expected_counts,
    plan_batch,
)
from .view import Display, View, print_intro


async def _connect(url: str, tls: TLS | None = None) -> AbstractRobustConnection:
    try:
        return await connect(url, name="rabbitq demo", tls=tls)
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
            await channel.get_exchange(app.exchange)  # fails now if it is missing

            async def one(item: Planned) -> None:
                if item.message is not None:
                    await pub.publish(item.message, message_id=item.message_id)
                else:
                    props = properties.raw(item.raw_type, message_id=item.message_id)
                    if item.to_queue:
                        await send_confirmed(channel, "", app.queue, item.raw, props)
                    else:
                        await send_confirmed(channel, app.exchange, item.raw_type, item.raw, props)
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
    tls: TLS | None = None,
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
    tally = DemoTally(queue)
    view = View(console, display, topology, tally, expected)
    specs = [(q.name, q.kind) for q in topology.queues]
    depths: tuple[QueueDepth, ...] = ()
    settled = False

    connection = await _connect(url, tls)
    try:
        await _prepare(connection, topology)
        if display != "none":
            print_intro(console, app, batch, url)
        spec = WorkerSpec(app_spec="rabbitq demo", url=url, grace_period=5, tls=tls)
        worker = worker_for(app, spec, hooks=tally)
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


async def _until_ready(worker: AnyWorker, task: asyncio.Task[None]) -> None:
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
    url: str, *, queue: str = DEMO_QUEUE, exchange: str = DEMO_EXCHANGE, tls: TLS | None = None
) -> CleanupResult:
    """Delete the demo's queues (main, retry, DLQ) and its exchange. Idempotent."""
    topology = build_app(queue=queue, exchange=exchange).topology()
    connection = await _connect(url, tls)
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
