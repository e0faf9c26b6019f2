"""The chaos scenarios, shared by the tests (small counts) and ``scripts/reliability.py``
(the figures in ``docs/reliability.md``). Each runs against the broker at ``url``
(a private node for anything that restarts the broker or cuts every connection), is
bounded in messages and seconds, and returns a :class:`Result` with its tally.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from rabbitq import Hooks, Worker

from ..helpers import Recorder, queue_depth, running, wait_for
from .harness import ChaosRun
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
    url: str, workdir: Path, *, messages: int = 1500, kills: int = 4, queue_type: str = "classic"
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
    url: str, workdir: Path, *, messages: int = 800, cuts: int = 3, queue_type: str = "classic"
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
    url: str, workdir: Path, *, messages: int = 50, queue_type: str = "classic"
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
    queue_type: str = "classic",
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


def _port(url: str) -> int:
    from urllib.parse import urlsplit

    return urlsplit(url).port or 5672


async def _resumed(run: ChaosRun, moment: float, pid: int | None = None, limit: float = 60) -> float:
    """Seconds from ``moment`` until a handler (of ``pid``) began, polling the ledger."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        first = run.ledger.first_after(moment, pid)
        if first is not None:
            return first - moment
        if run.accounted():
            break  # nothing left to handle: the fault came too late to measure
        await asyncio.sleep(0.05)
    return float("nan")
