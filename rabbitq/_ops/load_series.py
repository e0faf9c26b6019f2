"""The series of how much work a worker holds (part of :class:`rabbitq._ops.metrics.Metrics`):
handlers running, deliveries unacked, and the prefetch that bounds both. The dashboard's
*In flight vs prefetch* panel and the autoscaling recipe (deploy/k8s/keda-scaledobject.yaml:
ready messages plus ``rabbitq_messages_unacked``) read them. Summed over the processes of
``rabbitq worker --processes N``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge


class LoadSeries:
    """``rabbitq_messages_in_flight``, ``rabbitq_messages_unacked``, ``rabbitq_prefetch``."""

    def _load_series(self, r: CollectorRegistry) -> None:
        self.messages_in_flight = Gauge(
            "rabbitq_messages_in_flight",
            "Handlers running now.",
            ["queue"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.messages_unacked = Gauge(
            "rabbitq_messages_unacked",
            "Deliveries received and not settled yet (running, waiting for a limit, a key, a "
            "batch or a copy's confirm): what RabbitMQ counts as unacked for this worker.",
            ["queue"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.prefetch = Gauge(
            "rabbitq_prefetch",
            "Configured prefetch: handlers in flight at most.",
            ["queue"],
            registry=r,
            multiprocess_mode="livesum",
        )
        # the per-message hooks keep the labelled children they use (labels() is slow)
        self._in_flight_children: dict[str, Gauge] = {}
        self._unacked_children: dict[str, Gauge] = {}

    def expect_load(self, queue: str) -> None:
        """Start ``queue``'s in-flight and unacked series at zero."""
        self.messages_in_flight.labels(queue)
        self.messages_unacked.labels(queue)

    def _in_flight(self, queue: str) -> Gauge:
        child = self._in_flight_children.get(queue)
        if child is None:
            child = self._in_flight_children[queue] = self.messages_in_flight.labels(queue)
        return child

    def handler_started(self, queue: str) -> None:
        self._in_flight(queue).inc()

    def handler_finished(self, queue: str) -> None:
        self._in_flight(queue).dec()

    def unacked_changed(self, queue: str, unacked: int) -> None:
        child = self._unacked_children.get(queue)
        if child is None:
            child = self._unacked_children[queue] = self.messages_unacked.labels(queue)
        child.set(unacked)

    def prefetch_changed(self, queue: str, prefetch: int) -> None:
        self.prefetch.labels(queue).set(prefetch)
