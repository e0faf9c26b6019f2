"""The series of the worker's queue watch (:mod:`rabbitq._ops.queue_watch`): a DLQ whose
settings drop dead letters, and dead letters a quorum queue holds out of sight. Part of
:class:`rabbitq._ops.metrics.Metrics`; absent until the management API answered."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Gauge


class WatchSeries:
    """``rabbitq_dlq_drop_risk`` and ``rabbitq_dead_letters_held_by_broker``, and what a
    ready worker's ``/readyz`` adds after "ready" (a DLQ that drops)."""

    def _watch_series(self, r: CollectorRegistry) -> None:
        self._drops: dict[str, str] = {}  # DLQ -> what drops its messages (amqp.droprisk)
        self.dlq_drop_risk = Gauge(
            "rabbitq_dlq_drop_risk",
            "Settings of the DLQ that make the broker drop dead letters (0: none; absent: "
            "not checked, no management API).",
            ["queue"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.held_by_broker_gauge = Gauge(
            "rabbitq_dead_letters_held_by_broker",
            "Dead letters a quorum queue holds because their target was missing (sent again "
            "on the broker's timer); absent: not checked, no management API.",
            ["queue"],
            registry=r,
            multiprocess_mode="livemax",
        )

    def dlq_checked(self, queue: str, risks: Sequence[object] | None) -> None:
        """The DLQ ``queue`` was checked (``rabbitq._ops.queue_watch``): ``risks`` are the
        settings that drop its messages (None: not known)."""
        if risks is None:
            return
        rest = {q: why for q, why in self._drops.items() if q != queue}
        line = f"{queue} drops messages: " + "; ".join(map(str, risks))
        self._drops = {**rest, queue: line} if risks else rest
        self.dlq_drop_risk.labels(queue).set(len(risks))

    def held_by_broker(self, queue: str, held: int) -> None:
        """``queue`` holds ``held`` dead letters it could not hand on (its target was missing)."""
        self.held_by_broker_gauge.labels(queue).set(held)

    def ready_detail(self) -> str | None:
        """What a ready worker's ``/readyz`` adds after "ready" (a DLQ that drops)."""
        return "; ".join(self._drops.values()) or None
