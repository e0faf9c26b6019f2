"""Metrics: hooks become the contracted series, on the registry given, with bounded labels."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry

from rabbitq import App, Message, Metrics, RetryPolicy
from rabbitq._amqp.topology import QueueDepth

CONTRACT = {
    "rabbitq_messages_received": "counter",
    "rabbitq_messages_processed": "counter",
    "rabbitq_messages_requeued": "counter",
    "rabbitq_retries": "counter",
    "rabbitq_duplicates": "counter",
    "rabbitq_dead_letters": "counter",
    "rabbitq_handler_duration_seconds": "histogram",
    "rabbitq_messages_in_flight": "gauge",
    "rabbitq_messages_unacked": "gauge",
    "rabbitq_prefetch": "gauge",
    "rabbitq_limit_wait_seconds": "histogram",
    "rabbitq_limit_concurrency": "gauge",
    "rabbitq_published": "counter",
    "rabbitq_publish_errors": "counter",
    "rabbitq_queue_messages": "gauge",
    "rabbitq_queue_consumers": "gauge",
    "rabbitq_connection_up": "gauge",
    "rabbitq_reconnects": "counter",
    "rabbitq_consuming": "gauge",
    "rabbitq_circuit_open": "gauge",
    "rabbitq_connection_blocked": "gauge",
    "rabbitq_copies_held": "gauge",
    "rabbitq_dlq_drop_risk": "gauge",
    "rabbitq_dead_letters_held_by_broker": "gauge",
    "rabbitq_topology_redeclared": "counter",
    "rabbitq_handler_threads_abandoned": "gauge",
    "rabbitq_batch_size": "histogram",
    "rabbitq_batches": "counter",
    "rabbitq_info": "gauge",
    "rabbitq_ordered_keys_blocked": "gauge",
}


class Mail(Message, type="test.metrics.mail"):
    to: str


def value(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_every_contracted_metric_is_registered_with_its_type_and_nothing_else():
    m = Metrics()
    families = {f.name: f.type for f in m.registry.collect()}
    assert families == CONTRACT


def test_metrics_use_their_own_registry_never_the_global_one():
    before = set(REGISTRY._names_to_collectors)
    registry = CollectorRegistry()
    m = Metrics(registry)
    assert m.registry is registry
    assert set(REGISTRY._names_to_collectors) == before
    assert Metrics().registry is not Metrics().registry  # two in one process do not clash


def test_outcomes_are_counted_by_outcome_tier_and_reason():
    m = Metrics()
    q, t = "emails", "email.send"
    m.received(q, t)
    m.succeeded(q, t, 0.02)
    m.received(q, t)
    m.retried(q, t, "10s", 0.5)
    m.received(q, t)
    m.dead_lettered(q, t, "exhausted", 0.1)
    m.received(q, "unknown")
    m.dead_lettered(q, "unknown", "unknown-type", 0.0)
    assert value(m, "rabbitq_messages_received_total", queue=q, type=t) == 3
    assert value(m, "rabbitq_messages_received_total", queue=q, type="unknown") == 1
    for outcome in ("success", "retried", "dead_lettered"):
        assert value(m, "rabbitq_messages_processed_total", queue=q, type=t, outcome=outcome) == 1
    assert value(m, "rabbitq_retries_total", queue=q, type=t, delay="10s") == 1
    assert value(m, "rabbitq_dead_letters_total", queue=q, type=t, reason="exhausted") == 1
    assert (
        value(m, "rabbitq_dead_letters_total", queue=q, type="unknown", reason="unknown-type") == 1
    )
    # the handler ran three times; an unknown type never reached one
    assert value(m, "rabbitq_handler_duration_seconds_count", queue=q, type=t) == 3
    assert value(m, "rabbitq_handler_duration_seconds_count", queue=q, type="unknown") is None
    assert value(m, "rabbitq_handler_duration_seconds_bucket", queue=q, type=t, le="0.001") == 0
    assert value(m, "rabbitq_handler_duration_seconds_bucket", queue=q, type=t, le="60.0") == 3


def test_a_requeued_delivery_of_a_type_never_received_is_labelled_unknown():
    m = Metrics()
    m.received("q", "a.b")
    m.requeued("q", "a.b")
    m.requeued("q", "order-4711-from-some-producer")  # arrived while stopping
    assert value(m, "rabbitq_messages_requeued_total", queue="q", type="a.b") == 1
    assert value(m, "rabbitq_messages_requeued_total", queue="q", type="unknown") == 1


def test_in_flight_prefetch_breaker_and_publishes():
    m = Metrics()
    m.prefetch_changed("q", 64)
    m.handler_started("q")
    m.handler_started("q")
    m.handler_finished("q")
    m.breaker_changed("q", "open")
    assert value(m, "rabbitq_prefetch", queue="q") == 64
    assert value(m, "rabbitq_messages_in_flight", queue="q") == 1
    assert value(m, "rabbitq_circuit_open", queue="q") == 1
    m.breaker_changed("q", "half-open")
    assert value(m, "rabbitq_circuit_open", queue="q") == 0
    m.published("x", "a.b")
    m.publish_failed("x", "a.b", "unroutable")
    assert value(m, "rabbitq_published_total", exchange="x", type="a.b") == 1
    assert (
        value(m, "rabbitq_publish_errors_total", exchange="x", type="a.b", error="unroutable") == 1
    )


def test_unacked_is_what_each_queues_worker_last_reported_and_starts_at_zero():
    m = Metrics()
    app = App(queue="emails", url="amqp://x/")
    m.expect(app)
    assert value(m, "rabbitq_messages_unacked", queue="emails") == 0
    m.unacked_changed("emails", 7)
    m.unacked_changed("emails.prio.1", 3)
    m.unacked_changed("emails", 6)
    assert value(m, "rabbitq_messages_unacked", queue="emails") == 6
    assert value(m, "rabbitq_messages_unacked", queue="emails.prio.1") == 3


def test_a_loss_then_up_is_a_reconnect_and_a_drain_is_not():
    # (readiness itself is the worker's: tests/worker/test_consumer.py)
    m = Metrics()
    m.connection_changed(True)
    m.consuming_changed("q", True)
    assert value(m, "rabbitq_consuming", queue="q") == 1
    m.connection_changed(False)  # lost while consuming
    assert value(m, "rabbitq_connection_up") == 0
    m.connection_changed(True)
    assert value(m, "rabbitq_reconnects_total") == 1
    # a drain: stop consuming, then close; neither is a loss
    m.consuming_changed("q", False)
    assert value(m, "rabbitq_consuming", queue="q") == 0
    m.connection_changed(False)
    m.connection_changed(True)
    assert value(m, "rabbitq_reconnects_total") == 1


def test_queue_samples_set_depths_by_kind_and_skip_missing_queues():
    m = Metrics()
    m.queues_sampled(
        [
            QueueDepth(name="e", kind="main", exists=True, messages=5, consumers=2),
            QueueDepth(name="e.retry.10s", kind="retry", exists=True, messages=1),
            QueueDepth(name="e.dlq", kind="dlq", exists=True, messages=3),
            QueueDepth(name="e.retry.1m", kind="retry", exists=False),
        ]
    )
    assert value(m, "rabbitq_queue_messages", queue="e", kind="main") == 5
    assert value(m, "rabbitq_queue_messages", queue="e.retry.10s", kind="retry") == 1
    assert value(m, "rabbitq_queue_messages", queue="e.dlq", kind="dlq") == 3
    assert value(m, "rabbitq_queue_consumers", queue="e") == 2
    assert value(m, "rabbitq_queue_messages", queue="e.retry.1m", kind="retry") is None


def test_expect_starts_every_series_of_an_app_at_zero():
    app = App(queue="mails", retry=RetryPolicy(delays=(1, 10)))

    @app.handler(Mail)
    async def handle(msg: Mail) -> None: ...

    m = Metrics()
    m.expect(app)
    t = Mail.type_name()
    assert value(m, "rabbitq_messages_received_total", queue="mails", type=t) == 0
    assert value(m, "rabbitq_retries_total", queue="mails", type=t, delay="10s") == 0
    for reason in ("exhausted", "permanent", "invalid"):
        assert value(m, "rabbitq_dead_letters_total", queue="mails", type=t, reason=reason) == 0
    assert (
        value(m, "rabbitq_dead_letters_total", queue="mails", type="unknown", reason="unknown-type")
        == 0
    )
    assert value(m, "rabbitq_handler_duration_seconds_count", queue="mails", type=t) == 0
    assert value(m, "rabbitq_circuit_open", queue="mails") == 0
    # the safety series too, so that an alert's increase() or > 0 sees the first event
    assert value(m, "rabbitq_connection_blocked") == 0
    assert value(m, "rabbitq_copies_held", queue="mails") == 0
    assert value(m, "rabbitq_handler_threads_abandoned", queue="mails") == 0
    for reason in ("consumer_cancelled", "unroutable"):
        assert value(m, "rabbitq_topology_redeclared_total", queue="mails", reason=reason) == 0
    assert value(m, "rabbitq_published_total", exchange="rabbitq", type=t) == 0
    assert value(m, "rabbitq_publish_errors_total", exchange="rabbitq", type=t, error="nacked") == 0
    m.requeued("mails", t)  # an expected type is a trusted label from the start
    assert value(m, "rabbitq_messages_requeued_total", queue="mails", type=t) == 1


def test_the_info_metric_carries_the_version():
    import rabbitq

    m = Metrics()
    assert value(m, "rabbitq_info", version=rabbitq.__version__) == 1


def test_the_safety_gauges_follow_blocked_and_held_copies():
    m = Metrics(CollectorRegistry())
    m.copies_held("q", 2, "q.dlq refused the copy (full: its length limit)")
    assert value(m, "rabbitq_copies_held", queue="q") == 2
    m.connection_blocked("broker blocked: memory alarm")
    assert value(m, "rabbitq_connection_blocked") == 1
    m.connection_blocked(None)
    m.copies_held("q", 0, None)
    assert value(m, "rabbitq_connection_blocked") == 0
    assert value(m, "rabbitq_copies_held", queue="q") == 0


def test_redeclares_and_abandoned_threads_are_counted():
    m = Metrics(CollectorRegistry())
    m.topology_redeclared("q", "unroutable")
    m.handler_thread_abandoned("q", "t", 3)
    assert value(m, "rabbitq_topology_redeclared_total", queue="q", reason="unroutable") == 1
    assert value(m, "rabbitq_handler_threads_abandoned", queue="q") == 3
    m.handler_thread_returned("q", "t", 2)  # one of those handlers returned at last
    assert value(m, "rabbitq_handler_threads_abandoned", queue="q") == 2


def test_a_duplicate_is_counted_by_queue_and_type_and_starts_at_zero_for_idempotent_handlers():
    from rabbitq.effects import RedisStore

    app = App(queue="q", idempotency=RedisStore("redis://127.0.0.1:6379/0"))
    app.handler(Mail)(lambda m: None)
    m = Metrics()
    m.expect(app)
    assert value(m, "rabbitq_duplicates_total", queue="q", type="test.metrics.mail") == 0
    m.duplicate("q", "test.metrics.mail")
    assert value(m, "rabbitq_duplicates_total", queue="q", type="test.metrics.mail") == 1


def test_a_dlq_that_drops_messages_is_a_gauge_and_a_readiness_detail_not_a_503():
    from rabbitq._amqp.droprisk import drop_risks
    from rabbitq._amqp.topology import dlq_arguments

    m = Metrics(CollectorRegistry())
    m.dlq_checked("q.dlq", None)  # not known: no series
    assert value(m, "rabbitq_dlq_drop_risk", queue="q.dlq") is None
    risks = drop_risks(dlq_arguments("quorum"), {"message-ttl": 2000}, operator_policy="ttl")
    m.dlq_checked("q.dlq", risks)
    assert value(m, "rabbitq_dlq_drop_risk", queue="q.dlq") == 1
    assert m.ready_detail() == (
        "q.dlq drops messages: message-ttl 2000 (operator policy 'ttl'): messages older than "
        "2000 ms are dropped"
    )
    m.dlq_checked("q.dlq", [])
    assert value(m, "rabbitq_dlq_drop_risk", queue="q.dlq") == 0 and m.ready_detail() is None


def test_blocked_keys_are_a_gauge_and_a_readiness_detail_not_a_503():
    m = Metrics()
    m.keys_blocked("ledger.p1", ("acct-3", "acct-9"))
    assert value(m, "rabbitq_ordered_keys_blocked", queue="ledger.p1") == 2
    detail = m.ready_detail()
    assert detail is not None and "'acct-3', 'acct-9'" in detail and "replay" in detail

    m.keys_blocked("ledger.p1", ())
    assert value(m, "rabbitq_ordered_keys_blocked", queue="ledger.p1") == 0
    assert m.ready_detail() is None
