"""Prometheus metrics of the scheduler, on an injected registry (as
:class:`rabbitq._ops.metrics.Metrics`): the worker passes its own, so ``/metrics`` shows
them beside the worker's; ``rabbitq scheduler --metrics-port`` serves them alone."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .plan import LATE_AFTER

LATENESS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600)


class ScheduleMetrics:
    """Ticks published, late ticks, lateness, skipped ticks and leadership."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.published = Counter(
            "rabbitq_schedule_ticks_published_total",
            "Ticks published (each tick once, with all its messages, in one transaction).",
            ["schedule"],
            registry=r,
        )
        self.late = Counter(
            "rabbitq_schedule_ticks_late_total",
            f"Ticks published more than {LATE_AFTER:g} s after their time.",
            ["schedule"],
            registry=r,
        )
        self.lateness = Histogram(
            "rabbitq_schedule_tick_lateness_seconds",
            "Seconds from a tick's time to its publish.",
            ["schedule"],
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.skipped = Counter(
            "rabbitq_schedule_ticks_skipped_total",
            "Ticks not published, by reason: catch_up (missed while no scheduler led, "
            "beyond the schedule's catch_up), error (the schedule's function raised) or "
            "paused (rabbitq schedule pause).",
            ["schedule", "reason"],
            registry=r,
        )
        self.unconfirmed = Counter(
            "rabbitq_schedule_publish_unconfirmed_total",
            "Tick transactions whose commit was not confirmed (the leader stepped down; "
            "the tick may have been published, and the next leader publishes it again "
            "under the same message_id).",
            registry=r,
        )
        self.leading = Gauge(
            "rabbitq_schedule_leader",
            "1 while this process leads the app's schedules.",
            multiprocess_mode="livemax",
            registry=r,
        )
        self.takeovers = Counter(
            "rabbitq_schedule_takeovers_total",
            "Times this process took the schedules' lease.",
            registry=r,
        )

    def expect(self, names: Iterable[str]) -> None:
        """Start every series of these schedules at zero, so that the first increment
        shows in ``increase()`` (as the worker's metrics do)."""
        for name in names:
            self.published.labels(name)
            self.late.labels(name)
            self.lateness.labels(name)
            for reason in ("catch_up", "error", "paused"):
                self.skipped.labels(name, reason)
