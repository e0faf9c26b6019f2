"""``rabbitq_status_records_total{outcome}``: status records written, or lost because
the status store failed (``failed``) or the writer's queue was full (``dropped``).

A :class:`~rabbitq.status.writer.StatusObserver` on an injected registry; the worker
wiring (:mod:`rabbitq._ops.run`) attaches one to the app's writer when it serves metrics.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from .writer import OUTCOMES


class StatusMetrics:
    """Counts status records by outcome: ``written``, ``failed``, ``dropped``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.records = Counter(
            "rabbitq_status_records_total",
            "Status records written to the status store, or lost (failed, dropped).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in OUTCOMES:
            self.records.labels(outcome)

    def status_records(self, outcome: str, count: int) -> None:
        self.records.labels(outcome).inc(count)
