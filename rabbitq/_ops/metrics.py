"""Prometheus metrics: :class:`Metrics` turns worker and publisher hooks into ``rabbitq_*``
series on an injected registry (:func:`rabbitq._ops.sampler.sample_queues` keeps its
queue depths current).

Labels are bounded: ``queue``, ``type``, ``outcome``, ``reason``, ``delay``,
``exchange``, ``error``, ``kind``, ``version``; never ids or error text. Every metric
is listed, with its meaning, in ``docs/metrics.md``.

Each gauge names how it is combined across the processes of ``rabbitq worker
--processes N`` (prometheus-client's multiprocess mode; ignored in one process):
in-flight, unacked and prefetch add up, queue depths are the latest sample (every process
samples the same queues), connection and consuming are the minimum (1 only when
every process is connected), the breaker is the maximum.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .._amqp.topology import QueueDepth, delay_label
from ..hooks import REDECLARE_REASONS, UNKNOWN, Hooks
from ..retry import EXHAUSTED, INVALID, PERMANENT, UNKNOWN_TYPE
from .batch_series import BatchSeries
from .load_series import LoadSeries
from .ordering_series import OrderingSeries

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger("rabbitq.metrics")

# Handler durations from 1 ms to 60 s (and +Inf above).
DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
# Waits for a handler's rate or concurrency limit, from none to 10 minutes.
LIMIT_WAIT_BUCKETS = (
    0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0,
)  # fmt: skip
PUBLISH_ERRORS = ("unroutable", "nacked", "interrupted")  # publisher.error_kind's answers
# Dead letters whose handler never ran have no handler duration.
_NOT_RUN = frozenset({INVALID, UNKNOWN_TYPE})
# Circuit breaker states; only "open" holds the queue paused.
BREAKER_OPEN = "open"


def _version() -> str:
    try:
        return version("rabbitq")
    except PackageNotFoundError:  # a source tree that is not installed
        return "0+unknown"


class Metrics(LoadSeries, BatchSeries, OrderingSeries, Hooks):
    """Worker and publisher hooks that record Prometheus metrics.

    ``registry`` defaults to a new :class:`~prometheus_client.CollectorRegistry`
    of its own, never the global one. Pass it as ``Worker(app, hooks=metrics)`` and
    ``app.publisher(hooks=metrics)``; serve it with :func:`rabbitq.serve_metrics`.
    Readiness is the worker's own (:meth:`rabbitq.Worker.health`), not rebuilt here.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.messages_received = Counter(
            "rabbitq_messages_received_total",
            "Deliveries received (type 'unknown' when no handler knows it).",
            ["queue", "type"],
            registry=r,
        )
        self.messages_processed = Counter(
            "rabbitq_messages_processed_total",
            "Deliveries settled, by outcome: success, retried or dead_lettered.",
            ["queue", "type", "outcome"],
            registry=r,
        )
        self.messages_requeued = Counter(
            "rabbitq_messages_requeued_total",
            "Deliveries returned to their queue (shutdown, or a copy not confirmed).",
            ["queue", "type"],
            registry=r,
        )
        self.duplicates = Counter(
            "rabbitq_duplicates_total",
            "Deliveries whose idempotency key was handled before: acked, the handler not run.",
            ["queue", "type"],
            registry=r,
        )
        self.retries = Counter(
            "rabbitq_retries_total",
            "Confirmed retry copies, by retry tier (delay label such as 10s).",
            ["queue", "type", "delay"],
            registry=r,
        )
        self.dead_letters = Counter(
            "rabbitq_dead_letters_total",
            "Confirmed dead-letter copies, by reason: exhausted, permanent, invalid, unknown-type, "
            "blocked, undecryptable.",
            ["queue", "type", "reason"],
            registry=r,
        )
        self.handler_duration = Histogram(
            "rabbitq_handler_duration_seconds",
            "Time spent in handlers (deliveries whose handler ran).",
            ["queue", "type"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.limit_wait_seconds = Histogram(
            "rabbitq_limit_wait_seconds",
            "Time a delivery of a rate- or concurrency-limited handler waited for its turn.",
            ["queue", "type"],
            buckets=LIMIT_WAIT_BUCKETS,
            registry=r,
        )
        self.limit_concurrency = Gauge(
            "rabbitq_limit_concurrency",
            "Calls of a limited handler in progress now (its current concurrency).",
            ["queue", "type"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.published_total = Counter(
            "rabbitq_published_total",
            "Publishes confirmed by the broker.",
            ["exchange", "type"],
            registry=r,
        )
        self.publish_errors = Counter(
            "rabbitq_publish_errors_total",
            "Publishes that failed: unroutable, nacked or interrupted.",
            ["exchange", "type", "error"],
            registry=r,
        )
        self.queue_messages = Gauge(
            "rabbitq_queue_messages",
            "Messages ready in a queue (kind: main, retry, dlq, blocked), by passive declares.",
            ["queue", "kind"],
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.queue_consumers = Gauge(
            "rabbitq_queue_consumers",
            "Consumers of a queue, sampled by passive declares.",
            ["queue"],
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.connection_up = Gauge(
            "rabbitq_connection_up",
            "1 while connected to RabbitMQ.",
            registry=r,
            multiprocess_mode="livemin",
        )
        self.reconnects = Counter(
            "rabbitq_reconnects_total",
            "Connections re-established after a loss.",
            registry=r,
        )
        self.consuming = Gauge(
            "rabbitq_consuming",
            "1 while consuming the queue.",
            ["queue"],
            registry=r,
            multiprocess_mode="livemin",
        )
        self.circuit_open = Gauge(
            "rabbitq_circuit_open",
            "1 while the circuit breaker holds the queue paused.",
            ["queue"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.blocked_gauge = Gauge(
            "rabbitq_connection_blocked",
            "1 while the broker blocks the connection (a memory or disk alarm).",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.held_gauge = Gauge(
            "rabbitq_copies_held",
            "Deliveries held because the broker refused (or did not confirm) their copy.",
            ["queue"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.redeclared_total = Counter(
            "rabbitq_topology_redeclared_total",
            "Times the worker declared its queues again because one had gone away.",
            ["queue", "reason"],
            registry=r,
        )
        self.abandoned_gauge = Gauge(
            "rabbitq_handler_threads_abandoned",
            "Threads held by sync handlers that ran past their timeout.",
            ["queue"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self._load_series(r)
        self._watch_series(r)
        self._batch_series(r)
        self._ordering_series(r)
        self.info = Gauge(
            "rabbitq_info",
            "Always 1; the version label is rabbitq's version.",
            ["version"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.info.labels(_version()).set(1)
        self.connection_up.set(0)
        self.blocked_gauge.set(0)
        self._consuming_queues: dict[str, bool] = {}
        self._lost = False  # the connection went down while consuming
        self._types: set[str] = set()  # type labels the worker has vouched for
        self._received: dict[tuple[str, str], Counter] = {}
        self._processed_children: dict[tuple[str, str, str], Counter] = {}
        self._duration_children: dict[tuple[str, str], Histogram] = {}

    def expect(self, app: App) -> None:
        """Start every series that ``app``'s worker can produce at zero.

        A counter that appears only with its first increment hides that increment
        from ``increase()`` and ``rate()``: the first message to reach the DLQ would
        not fire the alert. :func:`rabbitq.serve_metrics` calls this for you.
        """
        queue = app.queue
        for handler in app.handlers.values():
            t = handler.type_name
            self._types.add(t)
            self.messages_received.labels(queue, t)
            self.messages_requeued.labels(queue, t)
            if handler.idempotency is not None:
                self.duplicates.labels(queue, t)
            for outcome in ("success", "retried", "dead_lettered"):
                self.messages_processed.labels(queue, t, outcome)
            for ms in sorted(set(handler.retry.delays_ms)):
                self.retries.labels(queue, t, delay_label(ms))
            for reason in (EXHAUSTED, PERMANENT, INVALID):
                self.dead_letters.labels(queue, t, reason)
            self.handler_duration.labels(queue, t)
            if handler.limit is not None:
                self.limit_wait_seconds.labels(queue, t)
                self.limit_concurrency.labels(queue, t)
            # so that publish panels read 0, not "no data", where nothing publishes
            self.published_total.labels(app.exchange, t)
            for error in PUBLISH_ERRORS:
                self.publish_errors.labels(app.exchange, t, error)
        self.messages_received.labels(queue, UNKNOWN)
        self.messages_processed.labels(queue, UNKNOWN, "dead_lettered")
        self.dead_letters.labels(queue, UNKNOWN, UNKNOWN_TYPE)
        self.expect_load(queue)
        self.circuit_open.labels(queue)
        self.consuming.labels(queue)
        self.held_gauge.labels(queue)
        self.abandoned_gauge.labels(queue)
        for reason in REDECLARE_REASONS:
            self.redeclared_total.labels(queue, reason)
        self.expect_batches(app)

    # -- hooks ----------------------------------------------------------------------

    def _type(self, type_name: str) -> str:
        return type_name if type_name in self._types else UNKNOWN

    # The per-message hooks keep the labelled children they use: labels() costs
    # several times the increment itself.

    def received(self, queue: str, type_name: str) -> None:
        key = (queue, type_name)
        child = self._received.get(key)
        if child is None:
            if type_name != UNKNOWN:
                self._types.add(type_name)
            child = self._received[key] = self.messages_received.labels(queue, type_name)
        child.inc()

    def limit_waited(self, queue: str, type_name: str, seconds: float) -> None:
        self.limit_wait_seconds.labels(queue, type_name).observe(seconds)

    def limit_running(self, queue: str, type_name: str, running: int) -> None:
        self.limit_concurrency.labels(queue, type_name).set(running)

    def _processed(self, queue: str, type_name: str, outcome: str) -> Counter:
        key = (queue, type_name, outcome)
        child = self._processed_children.get(key)
        if child is None:
            child = self._processed_children[key] = self.messages_processed.labels(*key)
        return child

    def _duration(self, queue: str, type_name: str) -> Histogram:
        key = (queue, type_name)
        child = self._duration_children.get(key)
        if child is None:
            child = self._duration_children[key] = self.handler_duration.labels(*key)
        return child

    def succeeded(self, queue: str, type_name: str, duration: float) -> None:
        self._processed(queue, type_name, "success").inc()
        self._duration(queue, type_name).observe(duration)

    def retried(self, queue: str, type_name: str, delay: str, duration: float) -> None:
        self._processed(queue, type_name, "retried").inc()
        self._duration(queue, type_name).observe(duration)
        self.retries.labels(queue, type_name, delay).inc()

    def dead_lettered(self, queue: str, type_name: str, reason: str, duration: float) -> None:
        self._processed(queue, type_name, "dead_lettered").inc()
        if reason not in _NOT_RUN:
            self._duration(queue, type_name).observe(duration)
        self.dead_letters.labels(queue, type_name, reason).inc()

    def duplicate(self, queue: str, type_name: str) -> None:
        self.duplicates.labels(queue, type_name).inc()

    def requeued(self, queue: str, type_name: str) -> None:
        # a delivery returned on shutdown may never have been received: its raw type
        # is then not a label the worker vouched for
        self.messages_requeued.labels(queue, self._type(type_name)).inc()

    def connection_changed(self, up: bool) -> None:
        if up and self._lost:
            self.reconnects.inc()
            self._lost = False
        elif not up and any(self._consuming_queues.values()):
            self._lost = True  # a loss, not the worker closing after it stopped consuming
        self.connection_up.set(1 if up else 0)

    def consuming_changed(self, queue: str, consuming: bool) -> None:
        self._consuming_queues = {**self._consuming_queues, queue: consuming}
        self.consuming.labels(queue).set(1 if consuming else 0)

    def breaker_changed(self, queue: str, state: str) -> None:
        self.circuit_open.labels(queue).set(1 if state == BREAKER_OPEN else 0)

    def connection_blocked(self, reason: str | None) -> None:
        self.blocked_gauge.set(1 if reason else 0)

    def copies_held(self, queue: str, held: int, reason: str | None) -> None:
        self.held_gauge.labels(queue).set(held)

    def topology_redeclared(self, queue: str, reason: str) -> None:
        self.redeclared_total.labels(queue, reason).inc()

    def handler_thread_abandoned(self, queue: str, type_name: str, abandoned: int) -> None:
        self.abandoned_gauge.labels(queue).set(abandoned)

    def handler_thread_returned(self, queue: str, type_name: str, abandoned: int) -> None:
        self.abandoned_gauge.labels(queue).set(abandoned)

    def published(self, exchange: str, type_name: str) -> None:
        self.published_total.labels(exchange, type_name).inc()

    def publish_failed(self, exchange: str, type_name: str, error: str) -> None:
        self.publish_errors.labels(exchange, type_name, error).inc()

    # -- queue depths ---------------------------------------------------------------

    def queues_sampled(self, depths: Iterable[QueueDepth]) -> None:
        """Record a round of passive declares; a queue that does not exist is skipped."""
        for d in depths:
            if d.exists:
                self.queue_messages.labels(d.name, d.kind).set(d.messages)
                self.queue_consumers.labels(d.name).set(d.consumers)
