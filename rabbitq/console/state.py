"""The console's running state: configuration, the depth sampler and its history,
page snapshots, jobs, and one lock per DLQ.

Reading a DLQ (the page) and changing it (a job) both consume it without acking, so two
at once would each miss what the other holds: the lock serialises them, and a page
drawn while a job runs on its DLQ says so instead of showing half the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aio_pika.abc import AbstractRobustConnection
from prometheus_client.parser import text_string_to_metric_families

from .._amqp.connection import connect
from .._amqp.topology import QueueDepth, queue_depths
from ..errors import RabbitqError
from ..settings import redact_url, scrub, url_password
from .actions import Jobs, Snapshots
from .history import History, Sample, counters_by_queue
from .security import Guard
from .targets import Target

log = logging.getLogger("rabbitq.console")

DEFAULT_SAMPLE_INTERVAL = 10.0
METRICS_TIMEOUT = 2.0
# The most messages a DLQ page reads (the page says when there are more).
DEFAULT_MAX_READ = 10_000


@dataclass(kw_only=True)
class Config:
    """How the console was started."""

    targets: Sequence[Target]
    url: str
    guard: Guard
    export_dir: Path
    metrics_urls: Sequence[str] = ()
    outboxes: Sequence[tuple[str, Any]] = ()  # (MODULE:APP, its Outbox): the /outbox page
    statuses: Sequence[tuple[str, Any]] = ()  # (MODULE:APP, the App) with a status store
    sample_interval: float = DEFAULT_SAMPLE_INTERVAL
    max_read: int = DEFAULT_MAX_READ
    allowed_hosts: Sequence[str] = ()
    """Host names served besides loopback's (the ``--bind`` address, ``--allowed-host``)."""

    @property
    def read_only(self) -> bool:
        """Whether actions are disabled."""
        return self.guard.read_only

    @property
    def shown_url(self) -> str:
        """The broker URL without its password."""
        return redact_url(self.url)


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT) as response:
        text: str = response.read().decode("utf-8", "replace")
    return text


def read_counters(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """``(received, processed)`` per queue from a worker's ``/metrics`` text."""
    triples = [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]
    return (
        counters_by_queue(triples, "rabbitq_messages_received_total"),
        counters_by_queue(triples, "rabbitq_messages_processed_total"),
    )


@dataclass(kw_only=True)
class State:
    """Everything the routes share."""

    config: Config
    history: History = field(default_factory=History)
    snapshots: Snapshots = field(default_factory=Snapshots)
    jobs: Jobs = field(default_factory=Jobs)
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    connection: AbstractRobustConnection | None = None
    metrics_reachable: bool = False
    broker_error: str | None = None
    _sampler: asyncio.Task[None] | None = None

    def lock(self, dlq: str) -> asyncio.Lock:
        """The lock that serialises reading and changing ``dlq``."""
        return self.locks.setdefault(dlq, asyncio.Lock())

    def target(self, queue: str) -> Target | None:
        """The target whose queue or DLQ is ``queue``."""
        return next((t for t in self.config.targets if queue in (t.queue, t.dlq)), None)

    async def start(self) -> None:
        """Connect for sampling and start the sampler (a broker that is down is shown on
        the page, and retried)."""
        self._sampler = asyncio.create_task(self._sample_forever())

    async def stop(self) -> None:
        """Stop sampling, wait for running jobs, close the connection."""
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        if self.jobs.tasks:
            await asyncio.gather(*self.jobs.tasks, return_exceptions=True)
        if self.connection is not None:
            with contextlib.suppress(Exception):
                await self.connection.close()

    async def _sample_forever(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # sample_once records what went wrong
                await self.sample_once()
            await asyncio.sleep(self.config.sample_interval)

    async def sample_once(self) -> list[QueueDepth]:
        """One round: every target's queue depths, and the workers' counters."""
        try:
            if self.connection is None:
                self.connection = await connect(self.config.url, name="rabbitq console")
            specs = [spec for t in self.config.targets for spec in t.queues]
            depths = await queue_depths(self.connection, specs)
        except Exception as exc:  # the one line the CLI would print ("refused the login")
            said = scrub(str(exc), url_password(self.config.url)) or type(exc).__name__
            self.broker_error = (
                said  # rabbitq's errors name the broker already
                if isinstance(exc, RabbitqError)
                else f"cannot read queue depths from {self.config.shown_url}: {said}"
            )
            log.warning("%s", self.broker_error)
            raise
        self.broker_error = None
        received, processed = await self._counters()
        self.history.add(
            Sample(
                at=time.time(),
                depths={d.name: d.messages for d in depths if d.exists},
                consumers={d.name: d.consumers for d in depths if d.exists},
                received=received,
                processed=processed,
            )
        )
        return depths

    async def _counters(self) -> tuple[dict[str, float] | None, dict[str, float] | None]:
        if not self.config.metrics_urls:
            return None, None
        received: dict[str, float] = {}
        processed: dict[str, float] = {}
        reached = False
        for url in self.config.metrics_urls:
            try:
                text = await asyncio.to_thread(_fetch, url)
                r, p = read_counters(text)
            except Exception as exc:  # unreachable: the depths still tell something
                log.debug("metrics at %s unreachable: %s", redact_url(url), type(exc).__name__)
                continue
            reached = True
            for queue, value in r.items():
                received[queue] = received.get(queue, 0.0) + value
            for queue, value in p.items():
                processed[queue] = processed.get(queue, 0.0) + value
        self.metrics_reachable = reached
        return (received, processed) if reached else (None, None)
