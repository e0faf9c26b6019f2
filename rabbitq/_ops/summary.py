"""The worker's periodic INFO line, :class:`Summary`: "handled 120, retried 3,
dead-lettered 1 in the last 60s", so that a worker at INFO says that it works without a
line per message (each message's own line is at DEBUG: ``rabbitq._worker.outcome_log``).

A :class:`~rabbitq.hooks.Hooks` observer that ``rabbitq worker`` adds beside its
metrics (``rabbitq._ops.run``): it counts outcomes, and the first outcome after a quiet
spell starts a window of :data:`SUMMARY_INTERVAL` seconds at whose end one line says what
the window held. An idle worker says nothing and runs no timer.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..hooks import Hooks

log = logging.getLogger("rabbitq.worker")

SUMMARY_INTERVAL = 60.0
"""Seconds a summary covers (from the first outcome after the last summary)."""


class Summary(Hooks):
    """Counts handled, retried, dead-lettered and requeued deliveries; logs them once per
    window (:data:`SUMMARY_INTERVAL`), and what is left at :meth:`flush`."""

    def __init__(self, interval: float = SUMMARY_INTERVAL) -> None:
        self.interval = interval
        self.counts = {"handled": 0, "retried": 0, "dead-lettered": 0, "requeued": 0}
        self._started: float | None = None  # monotonic start of the open window
        self._timer: asyncio.TimerHandle | None = None

    def succeeded(self, queue: str, type_name: str, duration: float) -> None:
        """Count a delivery handled (acked)."""
        self._count("handled")

    def retried(self, queue: str, type_name: str, delay: str, duration: float) -> None:
        """Count a delivery sent to a retry queue."""
        self._count("retried")

    def dead_lettered(self, queue: str, type_name: str, reason: str, duration: float) -> None:
        """Count a delivery sent to the DLQ."""
        self._count("dead-lettered")

    def requeued(self, queue: str, type_name: str) -> None:
        """Count a delivery given back to its queue."""
        self._count("requeued")

    def _count(self, kind: str) -> None:
        self.counts[kind] += 1
        if self._started is None:
            self._started = time.monotonic()
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on a loop: flush() alone says it
                return
            self._timer = loop.call_later(self.interval, self._window)

    def _window(self) -> None:
        self._timer = None
        self.flush()

    def line(self, seconds: float) -> str | None:
        """The summary of the counts so far over ``seconds`` (None if nothing happened):
        ``handled 120, retried 3, dead-lettered 1 in the last 60s``."""
        parts = [f"{kind} {n}" for kind, n in self.counts.items() if n]
        if not parts:
            return None
        return f"{', '.join(parts)} in the last {seconds:.0f}s"

    def flush(self) -> None:
        """Log the open window's line now (when the worker stops: its last seconds) and
        start counting afresh; nothing if nothing happened."""
        if self._started is None:
            return
        text = self.line(max(1.0, time.monotonic() - self._started))
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._started = None
        self.counts = dict.fromkeys(self.counts, 0)
        if text is not None:
            log.info("%s", text)
