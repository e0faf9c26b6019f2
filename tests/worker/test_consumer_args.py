"""The worker's consumer arguments: ``x-consumer-timeout`` from the handler timeouts
(pure), against the facts of RabbitMQ 3.10.8 (recorded here) and 4.3 (recorded
server properties; no 4.3 broker runs here)."""

from __future__ import annotations

import logging

from rabbitq import App, Message
from rabbitq._amqp.brokers import facts_for, version_from_server_properties
from rabbitq._worker.consumer_args import consumer_arguments, enforced_timeout, plan
from tests.server_properties import RABBITMQ_3_10_8, RABBITMQ_4_3_0

OLD = facts_for(version_from_server_properties(RABBITMQ_3_10_8))
NEW = facts_for(version_from_server_properties(RABBITMQ_4_3_0))


class Report(Message, type="consumer-args.report"):
    n: int


class Quick(Message, type="consumer-args.quick"):
    n: int


def app_with(timeout: float | None, *, rate: str | None = None) -> App:
    app = App(queue="consumer-args", timeout=10)
    app.handler(Quick)(lambda m: None)
    app.handler(Report, timeout=timeout, rate_limit=rate)(lambda m: None)
    return app


def test_a_handler_longer_than_consumer_timeout_asks_for_its_own_time_with_a_margin():
    app = app_with(2700)  # 45 minutes, against RabbitMQ's default of 30
    asked = consumer_arguments(app.handlers, consumer_timeout=1800)
    assert asked == {"x-consumer-timeout": 3_000_000}


def test_nothing_is_asked_when_the_broker_wide_timeout_covers_every_handler():
    assert consumer_arguments(app_with(60).handlers, consumer_timeout=1800) == {}


def test_nothing_is_asked_for_a_handler_without_a_timeout_nor_from_a_broker_without_one():
    assert consumer_arguments(app_with(None).handlers, consumer_timeout=1800) == {}
    assert consumer_arguments(app_with(2700).handlers, consumer_timeout=0) == {}


def test_a_rate_limited_handler_counts_what_its_held_deliveries_may_wait():
    app = app_with(60, rate="1/m")  # 32 held deliveries may wait 32 minutes
    [(key, ms)] = consumer_arguments(app.handlers, consumer_timeout=1800, held=32).items()
    assert key == "x-consumer-timeout" and ms >= (60 + 32 * 60) / 0.9 * 1000


def test_the_timeout_checked_is_the_one_the_broker_will_enforce():
    asked = {"x-consumer-timeout": 3_000_000}
    common = {"configured": 1800.0, "arguments": asked}
    new = {"timeout_queue_types": NEW.consumer_timeout_queue_types, "per_consumer_timeout": True}
    assert enforced_timeout(queue_type="quorum", **common, **new) == 3000
    # 4.3 enforces consumer_timeout on quorum queues only
    assert enforced_timeout(queue_type="classic", **common, **new) == 0
    # 3.10 accepts x-consumer-timeout and ignores it: the broker-wide one stands
    old = {"timeout_queue_types": OLD.consumer_timeout_queue_types, "per_consumer_timeout": False}
    assert enforced_timeout(queue_type="quorum", **common, **old) == 1800


def test_at_start_a_slow_handler_warns_on_3_10_but_not_on_4_3_which_honours_the_argument(caplog):
    caplog.set_level(logging.INFO, logger="rabbitq.worker")
    handlers = app_with(2700).handlers
    arguments, timeout = plan(handlers, configured=None, queue_type="quorum", held=0, facts=NEW)
    assert arguments == {"x-consumer-timeout": 3_000_000} and timeout == 3000
    arguments, timeout = plan(handlers, configured=None, queue_type="quorum", held=0, facts=OLD)
    assert arguments and timeout is None  # RabbitMQ's default assumed, as before
    said = [r.getMessage() for r in caplog.records]
    assert any("this broker ignores it" in m for m in said)
