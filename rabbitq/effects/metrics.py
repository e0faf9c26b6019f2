"""Prometheus series of the outbox relay, on an injected registry.

``rabbitq_outbox_pending`` rows not yet sent, ``rabbitq_outbox_oldest_pending_seconds``
the age of the oldest (the stuck-outbox alert watches it), ``rabbitq_outbox_relayed_total``
rows confirmed and marked sent, ``rabbitq_outbox_relay_errors_total{kind}`` failures
(``database``, ``broker``, ``publish``), ``rabbitq_outbox_failing_rows`` pending rows that
failed at least once (refused by the broker: each waits in its backoff; the
``RabbitqOutboxRowsFailing`` alert watches it). Labels: ``table`` (bounded: one per outbox).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from .relay import RelayObserver

ERROR_KINDS = ("database", "broker", "publish")


class OutboxMetrics(RelayObserver):
    """A :class:`~rabbitq.effects.relay.RelayObserver` that records Prometheus metrics."""

    def __init__(self, table: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.table = table
        r = self.registry
        self.pending_rows = Gauge(
            "rabbitq_outbox_pending",
            "Outbox rows not yet sent.",
            ["table"],
            registry=r,
            multiprocess_mode="max",
        )
        self.oldest = Gauge(
            "rabbitq_outbox_oldest_pending_seconds",
            "Age of the oldest outbox row not yet sent (0 when none).",
            ["table"],
            registry=r,
            multiprocess_mode="max",
        )
        self.failing_rows = Gauge(
            "rabbitq_outbox_failing_rows",
            "Outbox rows not yet sent that failed at least once (unroutable, refused).",
            ["table"],
            registry=r,
            multiprocess_mode="max",
        )
        self.relayed_rows = Counter(
            "rabbitq_outbox_relayed_total",
            "Outbox rows published with a confirm and marked sent.",
            ["table"],
            registry=r,
        )
        self.errors = Counter(
            "rabbitq_outbox_relay_errors_total",
            "Outbox relay failures, by kind: database, broker or publish.",
            ["table", "kind"],
            registry=r,
        )
        for kind in ERROR_KINDS:
            self.errors.labels(table, kind)
        self.pending_rows.labels(table).set(0)
        self.oldest.labels(table).set(0)
        self.failing_rows.labels(table).set(0)
        self.relayed_rows.labels(table)

    def relayed(self, count: int) -> None:
        self.relayed_rows.labels(self.table).inc(count)

    def relay_error(self, kind: str) -> None:
        self.errors.labels(self.table, kind).inc()

    def pending(self, rows: int, oldest_age: float) -> None:
        self.pending_rows.labels(self.table).set(rows)
        self.oldest.labels(self.table).set(oldest_age)

    def failing(self, rows: int) -> None:
        self.failing_rows.labels(self.table).set(rows)
