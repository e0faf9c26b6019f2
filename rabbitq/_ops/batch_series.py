"""The series of batch handlers (docs/batches.md): ``rabbitq_batch_size``, how many
deliveries each batch handed to its handler held, and ``rabbitq_batches_total``, what
handed it over. Part of :class:`rabbitq._ops.metrics.Metrics`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram

if TYPE_CHECKING:
    from ..app import App

# Batch sizes from 1 to 1000 (and +Inf above): max_size is usually one of these.
BATCH_SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
TRIGGERS = ("full", "max_wait", "stopping")  # worker.batching's FULL, WAITED, STOPPING


class BatchSeries:
    """``rabbitq_batch_size{queue,type}`` and ``rabbitq_batches_total{queue,type,trigger}``."""

    def _batch_series(self, r: CollectorRegistry) -> None:
        self.batch_size = Histogram(
            "rabbitq_batch_size",
            "Deliveries in each batch handed to a batch handler (duplicates included).",
            ["queue", "type"],
            buckets=BATCH_SIZE_BUCKETS,
            registry=r,
        )
        self.batches_total = Counter(
            "rabbitq_batches_total",
            "Batches handed to a batch handler, by trigger: full (max_size), max_wait, "
            "or stopping (the worker stops).",
            ["queue", "type", "trigger"],
            registry=r,
        )

    def expect_batches(self, app: App) -> None:
        """Start the series of ``app``'s batch handlers at zero."""
        for handler in app.handlers.values():
            if handler.batch is not None:
                self.batch_size.labels(app.queue, handler.type_name)
                for trigger in TRIGGERS:
                    self.batches_total.labels(app.queue, handler.type_name, trigger)

    def batch_flushed(self, queue: str, type_name: str, size: int, trigger: str) -> None:
        """A batch of ``size`` deliveries went to its handler (``trigger``: why then)."""
        self.batch_size.labels(queue, type_name).observe(size)
        self.batches_total.labels(queue, type_name, trigger).inc()
