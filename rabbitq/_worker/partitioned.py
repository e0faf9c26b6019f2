"""The worker of a partitioned app (``App(partitions=N)``, docs/ordering.md): one
:class:`~rabbitq._worker.lifecycle.Worker` per partition queue, in one process.

Every partition queue has single-active-consumer, so every worker process consumes
every partition and the broker makes one consumer of each queue the active one: on
RabbitMQ 3.x the first to subscribe, the next in line when it goes. A process that
subscribed to all N at once would therefore be active on all of them and the others
would only stand by. So a process subscribes to its **home** partitions at once (with
``--processes K``, process i's are those with ``p % K == i``; a single process's are
all) and to the rest :data:`STANDBY_DELAY` seconds later, as stand-by: started
together, K processes split the partitions evenly, and a partition whose process dies
fails over to one that stands by. When that process comes back it waits at the end of
the line; so every :data:`REBALANCE_INTERVAL` seconds a process that is active on a
partition that is not its home, while another consumer waits for it, gives it back:
drained, closed, subscribed again at the end of the line. The next in line takes it,
and within one round per process ahead of it the home process does. Home consumers also
carry a higher consumer priority (``x-priority``), which RabbitMQ 4.x's quorum queues
use to hand a partition back at once (documented, not verified here: 3.10 ignores it
for single-active-consumer).

Stopping keeps the order: a partition worker with ordered handlers starts nothing
more, lets the handlers that run finish (within the grace period), sends the acks and
*then* closes its connection, which gives back every held delivery and its consumer at
once. Cancelling the consumer first (what a plain worker does) would let the next
process become active, and start later messages of a key, while an earlier one still
ran here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection
from typing import Any

from .._amqp import partitions
from .._amqp.connection import connect_once
from .._amqp.start_retry import until_started
from .._amqp.topology import queue_depths
from ..app import App
from ..errors import ConfigurationError
from ..hooks import Hooks, combine
from .composite import Composite
from .laned import PriorityWorker
from .lifecycle import Worker

log = logging.getLogger("rabbitq.worker")

STANDBY_DELAY = 3.0
"""Seconds before a process subscribes to the partitions that are not its home."""
HOME_PRIORITY = 10
REBALANCE_INTERVAL = 30.0
"""Seconds between two looks at the stand-by partitions this process is active on."""
"""``x-priority`` of a home partition's consumer (stand-by ones: the default, 0)."""


def homes(partitions: int, index: int, processes: int) -> list[int]:
    """The home partitions of process ``index`` of ``processes`` (pure)."""
    own = [p for p in range(partitions) if p % max(1, processes) == index]
    return own or list(range(partitions))  # more processes than partitions: stand by


class PartitionedWorker(Composite):
    """Runs every partition of ``app`` in one process: one :class:`Worker` per partition
    queue (``partitions``), the home ones started first. It has a worker's interface
    (``run``, ``stop``, ``shutdown``, ``health``, ``ready``), and for the rest (``app``,
    ``url``, ``topology``, ``connection``, ...) it answers as its first home
    partition's worker (``first``)."""

    def __init__(
        self,
        app: App,
        *,
        home: Collection[int] | None = None,
        standby_delay: float = STANDBY_DELAY,
        rebalance_interval: float = REBALANCE_INTERVAL,
        **options: Any,
    ) -> None:
        if not app.partitions:
            raise ConfigurationError(f"{app!r} has no partitions: run it with Worker(app)")
        self.whole = app
        self.home = sorted(home) if home else list(range(app.partitions))
        self._seen = _Seen()
        self._hooks = combine(options.get("hooks"))  # the caller's; _seen rides beside
        self._options = {**options, "hooks": [self._hooks, self._seen]}
        first = self._worker(self.home[0])
        self.first = first
        self.partitions: dict[int, Worker] = {self.home[0]: first}
        for index in range(app.partitions):
            if index != self.home[0]:
                self.partitions[index] = self._worker(index)
        self.standby_delay = standby_delay
        self.rebalance_interval = rebalance_interval
        self.grace_period = first.grace_period
        self._started: list[Worker] = []
        self._stop = asyncio.Event()
        self._later: asyncio.Task[None] | None = None
        self._rebalancing: asyncio.Task[None] | None = None
        self._stopping = False
        self.yielded = 0  # stand-by partitions given back to the line (rebalance)

    def _worker(self, index: int) -> Worker:
        worker = Worker(self.whole.partition(index), **self._options)
        worker.consume_args["x-priority"] = HOME_PRIORITY if index in self.home else 0
        return worker

    # -- the lifecycle (the rest a worker answers: composite.Composite) -----------------

    async def start(self) -> None:
        """Check the broker has the consistent-hash exchange (on a connection of its own:
        without it the declare would close the worker's), then start the home partitions
        now, the stand-by ones a little later."""
        problem = await until_started(self._probe, url=self.url, wait=self.first.start_wait)
        if problem is not None:
            raise ConfigurationError(problem)
        for index in self.home:
            await self._start(self.partitions[index])
        standby = [w for i, w in self.partitions.items() if i not in self.home]
        if standby:
            self._later = asyncio.create_task(self._stand_by(standby))
            self._rebalancing = asyncio.create_task(self._rebalance())
        log.info(
            "partitions of %r: home %s, stand-by for the other %d",
            self.whole.queue, self.home, len(standby),
        )  # fmt: skip

    async def _probe(self) -> str | None:
        probing = await connect_once(self.url, name="rabbitq worker (probe)", tls=self.tls)
        try:
            return await partitions.probe(probing)
        finally:
            with contextlib.suppress(Exception):
                await probing.close()

    async def _start(self, worker: Worker) -> None:
        await worker.start()
        self._started.append(worker)

    async def _rebalance(self) -> None:
        """Every :attr:`rebalance_interval`, give back one stand-by partition this
        process is active on while another consumer waits for it: drained, closed, and
        subscribed again at the end of the line. The next in line takes it; a home
        process that came back is reached within one round per process before it."""
        while True:
            await asyncio.sleep(self.rebalance_interval)
            for index, worker in list(self.partitions.items()):
                if index in self.home or worker not in self._started:
                    continue
                if not self._seen.lately(worker.app.queue, self.rebalance_interval):
                    continue  # not active here (or idle): nothing to give back
                # Nobody waits for it? A quorum queue's declare-ok counts only the active
                # consumer of a single-active-consumer queue (3.10.8, measured): there
                # the answer is unknown, and the partition is given back all the same.
                if worker.app.queue_type == "classic" and await _consumers(worker) < 2:
                    continue
                await self._give_back(index, worker)
                break  # one a round: the line moves one step at a time

    async def _give_back(self, index: int, worker: Worker) -> None:
        log.info("giving %r back to the line (a stand-by partition)", worker.app.queue)
        self._started.remove(worker)
        await _stop_all([worker])
        self._seen.forget(worker.app.queue)
        fresh = self.partitions[index] = self._worker(index)
        self.yielded += 1
        try:
            await self._start(fresh)
        except Exception as exc:  # the broker is away: try again next round
            log.warning("could not stand by for %r again: %s", fresh.app.queue, exc)

    async def _stand_by(self, workers: list[Worker]) -> None:
        await asyncio.sleep(self.standby_delay)
        for worker in workers:
            try:
                await self._start(worker)
            except Exception as exc:  # the broker is away: the home partitions carry on
                log.warning("could not stand by for %r: %s", worker.app.queue, exc)

    def health(self) -> str | None:
        """The first partition's reason not to be ready, or None."""
        for worker in self._started or [self.first]:
            reason = worker.health()
            if reason is not None:
                return f"{worker.app.queue}: {reason}" if worker is not self.first else reason
        return None

    async def shutdown(self) -> None:
        """Stop every partition; with ordered handlers, drain before giving back.
        Idempotent."""
        if self._stopping:
            return
        self._stopping = True
        for task in (self._later, self._rebalancing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await _stop_all([*self._started, *(w for w in [self.first] if w not in self._started)])


async def _stop_all(workers: list[Worker]) -> None:
    """Stop ``workers``: those with ordered handlers in order (all frozen first, then
    each drained and closed: :meth:`Worker.drain_then_close`), then every one's own
    shutdown."""
    ordered = [w for w in workers if w.ordering is not None]
    for worker in ordered:
        worker.freeze()
    await asyncio.gather(*(w.drain_then_close() for w in ordered))
    await asyncio.gather(*(w.shutdown() for w in workers))


class _Seen(Hooks):
    """When each partition queue last received a delivery (is this process active?)."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}

    def received(self, queue: str, type_name: str) -> None:
        self.last[queue] = time.monotonic()

    def lately(self, queue: str, within: float) -> bool:
        return time.monotonic() - self.last.get(queue, -within * 2) < within

    def forget(self, queue: str) -> None:
        self.last.pop(queue, None)


async def _consumers(worker: Worker) -> int:
    """How many consumers the worker's partition queue has (a passive declare)."""
    connection = worker.connection
    if connection is None:
        return 0
    try:
        [depth] = await queue_depths(connection, [(worker.app.queue, "main")])
    except Exception:  # a connection going away: decide next round
        return 0
    return depth.consumers


AnyWorker = Worker | PartitionedWorker | PriorityWorker
"""What runs an app: a :class:`Worker`, or a :class:`PartitionedWorker` for
``App(partitions=N)``, a :class:`PriorityWorker` for ``App(priorities=N)`` (all have
``run``, ``stop``, ``health``, ``ready``, ``app``...)."""
