"""The worker of an app with priorities (``App(priorities=N)``, amqp.lanes): one
:class:`~rabbitq._worker.lifecycle.Worker` per lane queue, in one process, sharing one
:class:`~rabbitq._worker.lane_gate.LaneGate` of ``prefetch`` handler slots; it says
its start-up once for every lane (:class:`StartLines`).

Each lane's worker consumes its lane with twice the app's prefetch (so a lane's next
deliveries are already here when a slot frees) and runs them through the gate, which
lets a waiting delivery of a higher lane in first by weight. A lane's worker settles as
any worker does: its retries go through the delay ladder back to its lane
(:func:`rabbitq._amqp.copy.retry`), its dead letters into the app's one DLQ with the
lane as ``rabbitq-queue`` (a replay goes back there).

An app without priorities never comes here: ``rabbitq worker`` runs a plain
:class:`Worker`, whose consume path is unchanged.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

from .._amqp.lanes import lane_queue
from ..app import App
from ..errors import ConfigurationError
from ..hooks import combine
from ..settings import redact_url
from .composite import Composite
from .lane_gate import LaneGate, LaneStage
from .lifecycle import Worker

log = logging.getLogger("rabbitq.worker")

WAITING_ROOM = 2
"""A lane's broker prefetch, in handler slots (``prefetch``) of the whole worker."""


class StartLines(logging.Filter):
    """While the lanes start: a line that several lanes say alike (connecting, the
    consumer_timeout taken, a handler's warning) once, and no lane's own "consuming"
    line (its broker prefetch is the waiting room's, not the handler slots asked for):
    :meth:`PriorityWorker.start` says one for every lane."""

    def __init__(self, queues: list[str]) -> None:
        super().__init__()
        self.queues = set(queues)
        self.said: set[tuple[int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if str(record.msg).startswith("consuming %r on") and args and args[0] in self.queues:
            return False
        line = (record.levelno, record.getMessage())
        if line in self.said:
            return False
        self.said.add(line)
        return True


def lane_view(app: App, level: int, gate: LaneGate) -> App:
    """``app`` as the worker of lane ``level`` sees it: ``queue`` the lane's queue, the
    gate's stage first among the delivery stages."""
    view = copy.copy(app)
    view.lane, view.queue = level, lane_queue(app.queue, level)
    view.delivery_stages = (LaneStage(gate, level), *app.delivery_stages)
    return view


class PriorityWorker(Composite):
    """Runs every lane of ``app`` in one process. It has a worker's interface (``run``,
    ``stop``, ``shutdown``, ``health``, ``ready``); for the rest (``app``, ``url``,
    ``topology``, ``connection``, ...) it answers as lane 0's worker (``first``).
    ``options`` are :class:`Worker`'s; ``prefetch`` is the handler slots of all lanes."""

    def __init__(self, app: App, **options: Any) -> None:
        if app.priorities < 2 or app.lane is not None:
            raise ConfigurationError(f"{app!r} has no priorities: run it with Worker(app)")
        app.topology()  # refused here, in one line, if it cannot have lanes
        self.whole = app
        self._hooks = combine(options.get("hooks"))
        slots = options.get("prefetch") or app.prefetch
        self.gate = LaneGate(slots, app.priorities)
        # a lane's consumer holds twice the slots: while a lane's handlers run, as many
        # of its next deliveries wait here to claim the slots that free up
        self._options = {**options, "hooks": self._hooks, "prefetch": WAITING_ROOM * slots}
        self.lanes = [
            Worker(lane_view(app, level, self.gate), **self._options)
            for level in range(app.priorities)
        ]
        self.first = self.lanes[0]
        self.grace_period = self.first.grace_period
        self._started: list[Worker] = []
        self._stop = asyncio.Event()
        self._stopping = False

    async def start(self) -> None:
        """Start every lane's worker at once (so that no lane takes every slot while
        another connects); if one cannot start, stop them all and raise its error."""
        said = StartLines([w.app.queue for w in self.lanes])
        log.addFilter(said)
        try:
            starts = (w.start() for w in self.lanes)
            results = await asyncio.gather(*starts, return_exceptions=True)
        finally:
            log.removeFilter(said)
        self._started = [w for w, r in zip(self.lanes, results, strict=True) if r is None]
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.shutdown()
            raise errors[0]
        log.info(
            "consuming %r in %d lanes (%s) on %s (prefetch %d, shared by the lanes; types: %s)",
            self.whole.queue,
            len(self.lanes),
            ", ".join(self.started),
            redact_url(self.first.url),
            self.gate.slots,
            ", ".join(sorted(self.whole.handlers)),
        )

    def health(self) -> str | None:
        """The first lane's reason not to be ready (named by its queue), or None."""
        for worker in self._started or [self.first]:
            reason = worker.health()
            if reason is not None:
                return f"{worker.app.queue}: {reason}" if worker is not self.first else reason
        return None

    async def shutdown(self) -> None:
        """Stop every lane (each drains as a worker does). Idempotent."""
        if self._stopping:
            return
        self._stopping = True
        await asyncio.gather(*(w.shutdown() for w in self.lanes))
