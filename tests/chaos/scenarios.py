"""The chaos scenarios, shared by the tests (small counts) and ``scripts/reliability.py``
(the figures in ``docs/reliability.md``). Each runs against the broker at ``url``
(a private node for anything that restarts the broker or cuts every connection), is
bounded in messages and seconds, and returns a :class:`Result` with its tally.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from rabbitq import Hooks, Worker
from rabbitq.dlq.message import reason_of

from ..broker_node import BrokerNode
from ..helpers import Recorder, queue_depth, running, wait_for
from .harness import ChaosRun, WorkerProcess
from .ledger import Tally
from .proxy import FaultyProxy
from .service import Config


@dataclass
class Result:
    """One row of the reliability table."""

    scenario: str
    queue_type: str
    messages: int
    faults: str
    tally: Tally
    recover_s: list[float] = field(default_factory=list)
    """For each fault, seconds from the fault (or its end) until handling resumed."""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def worst_recovery(self) -> float | None:
        return max(self.recover_s, default=None)


class Reconnects(Hooks):
    """When an in-process worker's connection came back (unix times)."""

    def __init__(self) -> None:
        self.up: list[float] = []

    def connection_changed(self, up: bool) -> None:
        if up:
            self.up.append(time.time())

    async def after(self, moment: float, limit: float = 60) -> float:
        """Seconds from ``moment`` until the connection came back."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            back = [t for t in self.up if t > moment]
            if back:
                return back[0] - moment
            await asyncio.sleep(0.02)
        return float("nan")


# Handlers that fail now and then, over three short tiers: retry copies and dead letters
# are written all the time while the faults hit.
FLAKY = Config(fail_rate=0.2, permanent_rate=0.02, handle_seconds=0.02, delays="0.2,0.5,1")


async def kill_workers(
    url: str, workdir: Path, *, messages: int = 1500, kills: int = 4, queue_type: str = "quorum"
) -> Result:
    """Two worker processes under a backlog; one of them is killed with SIGKILL every
    0.5-1 s and replaced at once."""
    started = time.monotonic()
    config = replace(FLAKY, queue_type=queue_type, prefetch=10, handle_seconds=0.05)
    async with ChaosRun(url, workdir, config) as run:
        run.spawn()
        run.spawn()
        await run.publish(messages)
        recover: list[float] = []
        done = 0
        for _ in range(kills):
            await asyncio.sleep(random.uniform(0.5, 1.0))
            if run.progress() > 0.95:
                break  # kill only under load
            victim = random.choice(run.live_workers())
            moment = await asyncio.to_thread(victim.kill)
            replacement = run.spawn()
            done += 1
            recover.append(await _resumed(run, moment, replacement.pid))
        tally = await run.finish()
    return Result(
        "worker killed with SIGKILL under load",
        queue_type,
        messages,
        f"{done} x kill -9 (of 2 workers)",
        tally,
        recover,
        time.monotonic() - started,
    )


async def cut_connections(
    url: str, workdir: Path, *, messages: int = 800, cuts: int = 3, queue_type: str = "quorum"
) -> Result:
    """A worker behind a TCP proxy that drops every connection 0.3-0.8 s after it
    consumes again, while handlers run and retry copies are being published."""
    started = time.monotonic()
    config = replace(FLAKY, queue_type=queue_type, fail_rate=0.3, handle_seconds=0.1, prefetch=16)
    proxy = await FaultyProxy.start(_port(url))
    recover: list[float] = []
    reconnects = Reconnects()
    try:
        async with ChaosRun(url, workdir, config) as run:
            worker = Worker(run.app, url=proxy.url(url), grace_period=10, hooks=reconnects)
            async with running(worker):
                await run.publish(messages)
                for _ in range(cuts):
                    await asyncio.sleep(random.uniform(0.3, 0.8))
                    if run.progress() > 0.9:
                        break  # cut only under load
                    moment = time.time()
                    proxy.cut()
                    recover.append(await reconnects.after(moment))
                await run.settle()
            tally = await run.tally()
    finally:
        await proxy.close()
    return Result(
        "connection cut by a TCP proxy mid-handling",
        queue_type,
        messages,
        f"{len(recover)} x all connections reset",
        tally,
        recover,
        time.monotonic() - started,
    )


async def cut_during_retry_copies(
    url: str, workdir: Path, *, messages: int = 50, queue_type: str = "quorum"
) -> Result:
    """Every handler fails while the proxy stalls the connection, so each retry copy is
    published into a stalled connection and never confirmed; then the proxy cuts it.
    The originals must come back and be retried, none lost."""
    started = time.monotonic()
    release = asyncio.Event()
    config = replace(FLAKY, queue_type=queue_type, fail_rate=0.0, permanent_rate=0.0,
                     handle_seconds=0.0, prefetch=messages)  # fmt: skip
    proxy = await FaultyProxy.start(_port(url))
    recorder, reconnects = Recorder(), Reconnects()
    try:
        async with ChaosRun(url, workdir, config, gate=release.wait) as run:
            worker = Worker(
                run.app, url=proxy.url(url), grace_period=10, hooks=[recorder, reconnects]
            )
            async with running(worker):
                await run.publish(messages, fail_times=1)
                await wait_for(lambda: len(worker._handling) == messages)
                proxy.stall()
                release.set()  # every handler fails now: retry copies go into the stall
                await wait_for(lambda: not worker._handling)
                await asyncio.sleep(0.5)
                stored = await queue_depth(run.connection, run.app.topology().retries[0].name)
                moment = time.time()
                proxy.cut()
                recover = [await reconnects.after(moment)]
                await run.settle()
            tally = await run.tally()
    finally:
        await proxy.close()
    return Result(
        "connection stalled, then cut, while retry copies are published",
        queue_type,
        messages,
        f"{messages} unconfirmed retry copies, then a reset",
        tally,
        recover,
        time.monotonic() - started,
        [f"retry copies stored before the cut: {stored}",
         f"nacks (returns to the queue) attempted: {recorder.count('requeued')}"],
    )  # fmt: skip


async def stall_connection(
    url: str,
    workdir: Path,
    *,
    messages: int = 600,
    heartbeat: int = 2,
    queue_type: str = "quorum",
) -> Result:
    """A worker behind a proxy that stops forwarding (a half-open connection) and never
    resumes: the heartbeat must find the dead connection and the worker reconnect."""
    started = time.monotonic()
    config = replace(FLAKY, queue_type=queue_type, handle_seconds=0.05)
    proxy = await FaultyProxy.start(_port(url))
    reconnects = Reconnects()
    try:
        async with ChaosRun(url, workdir, config) as run:
            worker = Worker(run.app, url=proxy.url(url) + f"?heartbeat={heartbeat}",
                            grace_period=10, hooks=reconnects)  # fmt: skip
            async with running(worker):
                await run.publish(messages)
                await asyncio.sleep(0.5)
                moment = time.time()
                proxy.stall()
                recover = [await reconnects.after(moment)]
                await run.settle()
            tally = await run.tally()
    finally:
        await proxy.close()
    return Result(
        f"connection stalled (half-open), heartbeat {heartbeat} s",
        queue_type,
        messages,
        "1 stall, never resumed",
        tally,
        recover,
        time.monotonic() - started,
    )


NOTICE = 0.5
"""Seconds a worker may take to notice that the broker closed its connection."""


class ReadinessLog:
    """Polls a worker process's ``/readyz`` every 0.1 s in a thread: (unix time the
    request was sent, status). The time is the request's start, not its answer's: an
    answer the worker gave just before the broker went away may arrive after it."""

    def __init__(self, worker: WorkerProcess) -> None:
        self.worker = worker
        self.seen: list[tuple[float, int | None]] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ReadinessLog:
        self._task = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _poll(self) -> None:
        while True:
            sent = time.time()
            status = await asyncio.to_thread(self.worker.readyz)
            self.seen.append((sent, status))
            await asyncio.sleep(0.1)

    def statuses_between(self, start: float, end: float) -> set[int | None]:
        return {status for t, status in self.seen if start <= t <= end}

    async def ready_after(self, moment: float, limit: float = 60) -> float:
        """Seconds from ``moment`` until ``/readyz`` answered 200."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            ok = [t for t, status in self.seen if t > moment and status == 200]
            if ok:
                return ok[0] - moment
            await asyncio.sleep(0.05)
        return float("nan")


async def restart_broker(
    node: BrokerNode,
    workdir: Path,
    *,
    messages: int = 1500,
    down_for: float = 3.0,
    queue_type: str = "quorum",
) -> Result:
    """``rabbitmqctl stop_app``, ``down_for`` seconds, ``start_app``, while a worker
    process consumes and a publisher (``retry_for=30``) keeps publishing. The worker must
    recover by itself; its ``/readyz`` must say 503 while the broker is down (from
    :data:`NOTICE` s after ``stop_app`` returned: the worker's loop reads the broker's
    close frame in its own time on a loaded machine), 200 after."""
    started = time.monotonic()
    config = replace(FLAKY, queue_type=queue_type, handle_seconds=0.02, prefetch=16)
    async with ChaosRun(node.url, workdir, config) as run:
        worker = run.spawn(metrics_port=0)  # a free port, bound by the worker
        async with ReadinessLog(worker) as readiness:
            await readiness.ready_after(0)
            publishing = asyncio.create_task(
                run.publish(messages, retry_for=30, concurrency=16, rate=messages / 5)
            )
            await asyncio.sleep(1.5)
            await asyncio.to_thread(node.ctl, "stop_app")
            down = time.time()
            await asyncio.sleep(down_for)
            starting = time.time()
            await asyncio.to_thread(node.ctl, "start_app")
            await asyncio.to_thread(node.await_startup)
            up = time.time()
            ready = await readiness.ready_after(up)
            resumed = await _resumed(run, up, stop_when_idle=False)  # more is being published
            await publishing
            tally = await run.finish()
            during = readiness.statuses_between(down + NOTICE, starting)
    return Result(
        "broker restarted (stop_app, start_app) under load",
        queue_type,
        messages,
        f"broker down {starting - down:.1f} s (+{up - starting:.1f} s starting)",
        tally,
        [resumed],
        time.monotonic() - started,
        [f"/readyz while down: {sorted(map(str, during))}; 200 again {ready:.1f} s after start_app",
         f"publishes that waited through the outage and were confirmed: {len(tally.published)}"
         f" of {messages}"],
    )  # fmt: skip


async def sigterm_workers(
    url: str, workdir: Path, *, messages: int = 1000, terms: int = 3, queue_type: str = "quorum"
) -> Result:
    """SIGTERM a worker every 0.5-1 s while nearly half its attempts fail, so that retry
    copies and dead letters are being written at that moment; restart it each time."""
    started = time.monotonic()
    config = replace(FLAKY, queue_type=queue_type, fail_rate=0.35, permanent_rate=0.1,
                     handle_seconds=0.05, prefetch=16)  # fmt: skip
    codes: list[int] = []
    recover: list[float] = []
    async with ChaosRun(url, workdir, config) as run:
        spawned = time.time()
        worker = run.spawn()
        await run.publish(messages)
        # The first SIGTERM must find the worker working, as the later ones do (each
        # waits for its worker to resume): on a loaded machine a worker can take longer
        # than the pause below to start its interpreter, and a SIGTERM before its
        # handler is set ends it with -15 before it ever consumed.
        await _resumed(run, spawned, worker.pid)
        for _ in range(terms):
            await asyncio.sleep(random.uniform(0.5, 1.0))
            if run.progress() > 0.9:
                break
            moment = time.time()
            codes.append(await asyncio.to_thread(worker.terminate))
            worker = run.spawn()
            recover.append(await _resumed(run, moment, worker.pid))
        tally = await run.finish()
    return Result(
        "worker stopped with SIGTERM while writing retries and dead letters",
        queue_type,
        messages,
        f"{len(codes)} x SIGTERM, restarted",
        tally,
        recover,
        time.monotonic() - started,
        [f"exit statuses: {codes}"],
    )


async def crash_loop(
    url: str,
    workdir: Path,
    *,
    queue_type: str = "quorum",
    delivery_limit: int = 3,
    max_crashes: int = 8,
    others: int = 30,
    prefetch: int = 4,
) -> Result:
    """A message whose handler kills the process (``os._exit(1)``) every time, among
    ``others`` good ones; the worker is restarted after each crash, up to
    ``max_crashes`` times. On quorum queues the broker must dead-letter it after
    ``delivery_limit`` redeliveries; on classic queues nothing stops the loop."""
    started = time.monotonic()
    config = Config(queue_type=queue_type, delivery_limit=delivery_limit, prefetch=prefetch,
                    handle_seconds=0.05)  # fmt: skip
    crashes = 0
    async with ChaosRun(url, workdir, config) as run:
        await run.publish(1, crash=True)
        poison = next(iter(run.published))
        await run.publish(others, concurrency=1)
        while crashes < max_crashes and not run.accounted():
            worker = run.spawn()
            while worker.alive() and not run.accounted():
                await asyncio.sleep(0.05)
            if not worker.alive():
                crashes += 1
        # On a classic queue the loop only ends because we stop restarting the worker.
        tally = await run.finish(timeout=30 if run.accounted() else 0)
        headers = run.dead_letters.headers.get(poison, {})
        reason = (reason_of(headers) or "none") if poison in tally.dead else None
    collateral = {mid for mid in tally.dead if mid != poison}
    return Result(
        f"a message that kills the worker every time (delivery limit {delivery_limit})"
        if queue_type == "quorum" else "a message that kills the worker every time",
        queue_type,
        1 + others,
        f"{crashes} x os._exit(1) in the handler, worker restarted",
        tally,
        [],
        time.monotonic() - started,
        [f"poison message: {'DLQ, ' + str(reason) if reason else 'still in the queue'}",
         f"other messages dead-lettered with it (in flight at its crashes): {len(collateral)}"],
    )  # fmt: skip


@dataclass
class Speed:
    """Messages per second through rabbitq for one queue type (no faults)."""

    queue_type: str
    messages: int
    publish: float
    consume: float


async def throughput(url: str, workdir: Path, *, queue_type: str, messages: int = 5000) -> Speed:
    """Publish ``messages`` with ``publish_many`` (pipelined confirms), then time one
    in-process worker (prefetch 64) handling them with a handler that does nothing."""
    config = Config(queue_type=queue_type, prefetch=64)
    async with ChaosRun(url, workdir, config) as run:
        from .service import Job

        async with run.app.publisher() as pub:
            began = time.perf_counter()
            await pub.publish_many(Job(n=n) for n in range(messages))
            publish = messages / (time.perf_counter() - began)
        worker = Worker(run.app, grace_period=5)
        began = time.perf_counter()
        async with running(worker):
            await wait_for(lambda: len(run.ledger.entries()) >= messages, timeout=120)
            consume = messages / (time.perf_counter() - began)
    return Speed(queue_type, messages, publish, consume)


def _port(url: str) -> int:
    from urllib.parse import urlsplit

    return urlsplit(url).port or 5672


async def _resumed(
    run: ChaosRun,
    moment: float,
    pid: int | None = None,
    limit: float = 60,
    stop_when_idle: bool = True,
) -> float:
    """Seconds from ``moment`` until a handler (of ``pid``) began, polling the ledger."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        first = run.ledger.first_after(moment, pid)
        if first is not None:
            return first - moment
        if stop_when_idle and run.accounted():
            break  # nothing left to handle: the fault came too late to measure
        await asyncio.sleep(0.05)
    return float("nan")
