"""Running a chaos scenario: worker processes, publishing, the DLQ, and the final tally.

async with ChaosRun(node.url, tmp, Config(fail_rate=0.2, ...)) as run:
    worker = run.spawn()                 # rabbitq worker tests.chaos.service:app
    await run.publish(1000)
    worker.kill()                        # kill -9
    ...
    tally = await run.finish()           # waits until every message is accounted
tally.assert_nothing_lost()
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection

from rabbitq import App, PublishError
from rabbitq._amqp import failover
from rabbitq.dlq.message import reason_of
from rabbitq.settings import broker_urls

from ..helpers import declare_topology, delete_app_objects, drain_queue, unexpected_exits
from ..scrape import logged_port
from .ledger import Ledger, Tally
from .service import Config, Job, build_app

ROOT = Path(__file__).resolve().parents[2]


async def connect_admin(url: str) -> AbstractRobustConnection:
    """The test's own connection, quick to reconnect after a broker restart (to the
    next node, when ``url`` names several: see rabbitq.failover)."""
    return await failover.connect_robust(
        broker_urls(url),
        timeout=10,
        reconnect_interval=0.5,
        client_properties={"connection_name": "chaos test"},
    )


class WorkerProcess:
    """``rabbitq worker tests.chaos.service:app`` in a subprocess, logging to a file.

    ``metrics_port`` 0: the worker serves its endpoints on a free port that it binds
    itself and logs (so it logs at INFO, to a file of its own): :meth:`metrics_base`
    reads it from there. No port is picked first and bound later by someone else."""

    def __init__(
        self,
        config: Config,
        url: str,
        log: Path,
        grace_period: float = 10.0,
        metrics_port: int | None = None,
    ) -> None:
        env = {**os.environ, **config.env(), "PYTHONUNBUFFERED": "1"}
        env.pop("RABBITQ_URL", None)
        self.log = log
        self.metrics_port = metrics_port
        metrics = (
            []
            if metrics_port is None
            else ["--metrics-port", str(metrics_port), "--metrics-bind", "127.0.0.1"]
        )
        level = "INFO" if metrics_port == 0 else "WARNING"  # INFO: the line with the port
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rabbitq", "worker", "tests.chaos.service:app",
                 "--url", url, "--grace-period", str(grace_period), "--log-level", level,
                 *metrics],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.started = time.time()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> float:
        """``kill -9``; return the moment (unix time)."""
        moment = time.time()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        return moment

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM and wait for the exit status (the worker drains first)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def metrics_base(self) -> str | None:
        """``http://127.0.0.1:PORT`` of its endpoints; None while a worker started with
        ``metrics_port`` 0 has not yet logged which port it bound. Blocking (reads the log)."""
        assert self.metrics_port is not None
        if self.metrics_port == 0:
            self.metrics_port = logged_port(self.log.read_text(errors="replace")) or 0
        return f"http://127.0.0.1:{self.metrics_port}" if self.metrics_port else None

    def readyz(self) -> int | None:
        """The status of ``GET /readyz`` (None: no answer). Blocking; call in a thread."""
        base = self.metrics_base()
        if base is None:
            return None
        url = f"{base}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


class DeadLetterCollector:
    """Consumes the scenario's DLQ, recording each message id and its reason.

    A message the collector receives again after a broker restart (``redelivered``) is
    not counted twice: that is the collector's own lost ack, not a duplicate.
    """

    def __init__(self) -> None:
        self.dead: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.headers: dict[str, dict[str, Any]] = {}

    async def on_message(self, message: AbstractIncomingMessage) -> None:
        mid = message.message_id or "(none)"
        if not (message.redelivered and mid in self.dead):
            self.dead[mid] += 1
            self.reasons[reason_of(message.headers or {}) or "none"] += 1
            self.headers[mid] = dict(message.headers or {})
        with contextlib.suppress(Exception):
            await message.ack()


class ChaosRun:
    """One scenario's queues (unique names on the given broker), ledger, DLQ and tally."""

    def __init__(
        self,
        url: str,
        workdir: Path,
        config: Config,
        *,
        gate: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        tag = uuid.uuid4().hex[:8]
        workdir.mkdir(parents=True, exist_ok=True)
        self.url = url
        self.workdir = workdir
        self.config = dataclasses.replace(
            config,
            queue=f"chaos.{tag}",
            exchange=f"chaos.{tag}.x",
            ledger=str(workdir / f"handled-{tag}.log"),
        )
        self.tag = tag
        self.ledger = Ledger(self.config.ledger)
        self.app: App = build_app(self.config, url=url, gate=gate)
        self.published: set[str] = set()
        self.unconfirmed: set[str] = set()
        self.dead_letters = DeadLetterCollector()
        self.workers: list[WorkerProcess] = []
        self._count = 0
        self._connection: AbstractRobustConnection | None = None

    async def __aenter__(self) -> ChaosRun:
        self._connection = await connect_admin(self.url)
        await declare_topology(self._connection, self.app)
        await self.collect()
        return self

    async def collect(self) -> None:
        """Consume the DLQ into ``dead_letters`` (again, after :meth:`stop_collecting` or
        after the DLQ was deleted and declared again)."""
        channel = await self.connection.channel()
        self._dlq = await channel.declare_queue(self.app.topology().dlq.name, passive=True)
        self._dlq_tag = await self._dlq.consume(self.dead_letters.on_message)

    async def stop_collecting(self) -> None:
        """Stop consuming the DLQ (so that it fills up); :meth:`collect` resumes."""
        await self._dlq.cancel(self._dlq_tag)

    async def __aexit__(self, *exc_info: object) -> None:
        for worker in self.workers:
            if worker.alive():
                worker.proc.kill()
                worker.proc.wait()
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await delete_app_objects(self._connection, self.app)
            await self._connection.close()

    @property
    def connection(self) -> AbstractRobustConnection:
        assert self._connection is not None
        return self._connection

    def spawn(
        self, url: str | None = None, grace_period: float = 10.0, metrics_port: int | None = None
    ) -> WorkerProcess:
        """Start one more worker process (``metrics_port`` 0: see WorkerProcess)."""
        log = "worker.log" if metrics_port != 0 else f"worker-{len(self.workers) + 1}.log"
        worker = WorkerProcess(
            self.config, url or self.url, self.workdir / log, grace_period, metrics_port
        )
        self.workers.append(worker)
        return worker

    def died(self) -> str:
        """Why the last worker died that the run did not kill or stop (``""``: none did),
        with how many did: its exit code and the last lines of its log."""
        reports = [
            unexpected_exits([(w.proc, w.log)], f"worker {i + 1} of {len(self.workers)}")
            for i, w in enumerate(self.workers)
        ]
        died = [r for r in reports if r]
        return f"{len(died)} worker(s) died; the last: {died[-1]}" if died else ""

    def live_workers(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.alive()]

    async def publish(
        self,
        count: int,
        *,
        retry_for: float | None = None,
        concurrency: int = 64,
        rate: float | None = None,
        **fields: Any,
    ) -> None:
        """Publish ``count`` jobs with unique ids, ``concurrency`` at a time (at most
        ``rate`` per second if given); confirmed ids go to ``published``, the others to
        ``unconfirmed``."""
        async with self.app.publisher(retry_for=retry_for) as pub:
            pending: set[asyncio.Task[None]] = set()
            for _ in range(count):
                self._count += 1
                mid = f"{self.tag}-{self._count}"
                job = Job(n=self._count, **fields)
                pending.add(asyncio.create_task(self._publish_one(pub, mid, job)))
                if len(pending) >= concurrency:
                    _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if rate:
                    await asyncio.sleep(1 / rate)
            if pending:
                await asyncio.wait(pending)

    async def _publish_one(self, pub: Any, mid: str, job: Job) -> None:
        try:
            await pub.publish(job, message_id=mid)
        except PublishError:
            self.unconfirmed.add(mid)
        else:
            self.published.add(mid)

    def accounted(self) -> bool:
        done = set(self.ledger.handled()) | set(self.dead_letters.dead)
        return self.published <= done

    def progress(self) -> float:
        """The share of published messages accounted for so far."""
        done = set(self.ledger.handled()) | set(self.dead_letters.dead)
        return len(self.published & done) / max(1, len(self.published))

    async def settle(self, timeout: float = 120) -> bool:
        """Wait until every published message is handled or dead-lettered."""
        deadline = time.monotonic() + timeout
        while not self.accounted():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.2)
        return True

    async def finish(self, timeout: float = 120) -> Tally:
        """Settle, stop the worker processes (SIGTERM), and tally."""
        await self.settle(timeout)
        for worker in self.live_workers():
            worker.terminate()
        return await self.tally()

    async def tally(self) -> Tally:
        """Count, once the workers have stopped. Messages still in the main or retry
        queues are redeliveries of accounted ones (duplicates) or, if the scenario did
        not settle, ``pending``."""
        await asyncio.sleep(0.5)  # the collector's last deliveries
        handled = self.ledger.handled()
        accounted = set(handled) | set(self.dead_letters.dead)
        pending: set[str] = set()
        for spec in self.app.topology().queues[:-1]:  # not the DLQ
            for message in await drain_queue(self.connection, spec.name):
                mid = message.message_id or "(none)"
                if mid in accounted:
                    handled[mid] += 1  # a redelivery that would have been handled again
                else:
                    pending.add(mid)
        return Tally(
            published=set(self.published),
            handled=handled,
            pending=pending,
            dead=Counter(self.dead_letters.dead),
            dlq_reasons=Counter(self.dead_letters.reasons),
            unconfirmed=set(self.unconfirmed),
            died=self.died(),
        )
