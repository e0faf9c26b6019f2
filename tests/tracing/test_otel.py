"""Tracing without a broker: the observer's spans, headers, links and log ids.

The worker's use of it, against the real broker, is tested in
tests/integration/worker/test_tracing_live.py.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from rabbitq.tracing import TraceIds
from rabbitq.tracing.base import NO_TRACING, PREVIOUS_SPAN, TRACEPARENT
from rabbitq.tracing.otel import OpenTelemetry


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> OpenTelemetry:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OpenTelemetry(tracer_provider=provider)


def _deliver(tracing: OpenTelemetry, headers: dict[str, Any], attempt: int) -> Any:
    return tracing.deliver(
        headers,
        queue="emails",
        type_name="email.send",
        routing_key="email.send",
        message_id="m1",
        correlation_id="c1",
        attempt=attempt,
        body_size=10,
    )


def test_the_default_tracing_writes_no_header_and_makes_no_span() -> None:
    headers: dict[str, Any] = {}
    NO_TRACING.publish(
        headers,
        exchange="x",
        routing_key="t",
        type_name="t",
        message_id="m",
        correlation_id=None,
        body_size=1,
    ).end()
    span = NO_TRACING.deliver(
        headers,
        queue="q",
        type_name="t",
        routing_key="t",
        message_id="m",
        correlation_id=None,
        attempt=1,
        body_size=1,
    )
    with span.activate():
        span.copied(headers)
    span.end("success")
    assert headers == {}


def test_a_message_that_fails_twice_and_is_replayed_is_one_trace(
    tracing: OpenTelemetry, exporter: InMemorySpanExporter
) -> None:
    headers: dict[str, Any] = {"rabbitq-attempt": 1}
    send = tracing.publish(
        headers,
        exchange="rabbitq",
        routing_key="email.send",
        type_name="email.send",
        message_id="m1",
        correlation_id="c1",
        body_size=10,
    )
    send.end()
    assert headers[TRACEPARENT].startswith("00-")

    first = _deliver(tracing, headers, 1)
    first.retried(delay="1s", next_attempt=2, deferred=False, error="OSError: down")
    retry_copy = dict(headers)
    first.copied(retry_copy)
    first.end("retried", "OSError: down")
    assert retry_copy[TRACEPARENT] == headers[TRACEPARENT]  # the creation context is kept

    second = _deliver(tracing, retry_copy, 2)
    second.dead_lettered(reason="exhausted", error="OSError: down")
    dlq_copy = dict(retry_copy)
    second.copied(dlq_copy)
    second.end("dead_lettered", "OSError: down")

    replayed = {k: v.encode() for k, v in dlq_copy.items() if isinstance(v, str)}  # as bytes
    tracing.replay(replayed, queue="emails", message_id="m1", correlation_id="c1").end()
    third = _deliver(tracing, replayed, 1)
    with third.activate():  # a follow-up published by the handler
        follow_up: dict[str, Any] = {}
        tracing.publish(
            follow_up,
            exchange="rabbitq",
            routing_key="email.sent",
            type_name="email.sent",
            message_id="m2",
            correlation_id="c1",
            body_size=3,
        ).end()
    third.end("success")

    spans = {s.name + str(i): s for i, s in enumerate(exporter.get_finished_spans())}
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == [
        "publish rabbitq",
        "process emails",
        "process emails",
        "replay emails",
        "publish rabbitq",
        "process emails",
    ]
    publish, first_s, second_s, replay, follow, third_s = spans.values()
    assert len({s.context.trace_id for s in spans.values()}) == 1  # one trace
    for consumer in (first_s, second_s, third_s):
        assert consumer.kind == SpanKind.CONSUMER
        assert consumer.parent is not None and consumer.parent.span_id == publish.context.span_id
    assert replay.parent is not None and replay.parent.span_id == publish.context.span_id
    assert follow.parent is not None and follow.parent.span_id == third_s.context.span_id

    def linked(span: ReadableSpan) -> list[int]:
        return [link.context.span_id for link in span.links]

    assert linked(first_s) == []
    assert linked(second_s) == [first_s.context.span_id]
    assert linked(replay) == [second_s.context.span_id]
    assert linked(third_s) == [replay.context.span_id]

    assert [e.name for e in first_s.events] == ["rabbitq.retry"]
    assert first_s.events[0].attributes == {
        "rabbitq.retry.delay": "1s",
        "rabbitq.retry.next_attempt": 2,
        "rabbitq.retry.deferred": False,
        "exception.message": "OSError: down",
    }
    assert first_s.status.status_code == StatusCode.ERROR
    assert second_s.attributes["rabbitq.dead_letter.reason"] == "exhausted"
    assert [e.name for e in second_s.events] == ["rabbitq.dead_letter"]
    assert third_s.status.status_code == StatusCode.UNSET
    assert third_s.attributes["rabbitq.outcome"] == "success"


def test_spans_carry_the_messaging_conventions_for_rabbitmq(
    tracing: OpenTelemetry, exporter: InMemorySpanExporter
) -> None:
    headers: dict[str, Any] = {}
    tracing.publish(
        headers,
        exchange="rabbitq",
        routing_key="email.send",
        type_name="email.send",
        message_id="m1",
        correlation_id="c1",
        body_size=10,
    ).end()
    _deliver(tracing, headers, 3).end("success")
    producer, consumer = exporter.get_finished_spans()
    assert producer.kind == SpanKind.PRODUCER
    assert dict(producer.attributes or {}) == {
        "messaging.system": "rabbitmq",
        "messaging.operation.name": "publish",
        "messaging.operation.type": "send",
        "messaging.operation": "send",
        "messaging.destination.name": "rabbitq",
        "messaging.message.id": "m1",
        "messaging.message.conversation_id": "c1",
        "messaging.rabbitmq.destination.routing_key": "email.send",
        "messaging.message.body.size": 10,
        "rabbitq.type": "email.send",
    }
    attrs = consumer.attributes or {}
    assert attrs["messaging.system"] == "rabbitmq"
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["messaging.destination.name"] == "emails"
    assert attrs["rabbitq.attempt"] == 3


def test_a_failed_publish_is_an_error_span(
    tracing: OpenTelemetry, exporter: InMemorySpanExporter
) -> None:
    send = tracing.publish(
        {},
        exchange="rabbitq",
        routing_key="t",
        type_name="t",
        message_id="m",
        correlation_id=None,
        body_size=1,
    )
    send.end(RuntimeError("unroutable"))
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"] == "RuntimeError"


def test_a_delivery_without_trace_headers_starts_a_trace_of_its_own(
    tracing: OpenTelemetry, exporter: InMemorySpanExporter
) -> None:
    _deliver(tracing, {PREVIOUS_SPAN: "garbage", TRACEPARENT: 12}, 1).end("success")
    (span,) = exporter.get_finished_spans()
    assert span.parent is None and list(span.links) == []


def test_log_records_carry_the_trace_and_span_ids_inside_a_span(
    tracing: OpenTelemetry, exporter: InMemorySpanExporter
) -> None:
    ids = TraceIds()
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    ids.filter(record)
    assert (record.trace_id, record.span_id) == ("", "")
    span = _deliver(tracing, {}, 1)
    with span.activate():
        ids.filter(record)
    span.end("success")
    (finished,) = exporter.get_finished_spans()
    assert record.trace_id == f"{finished.context.trace_id:032x}"
    assert record.span_id == f"{finished.context.span_id:016x}"


def test_json_log_lines_carry_the_ids_inside_a_span(tracing: OpenTelemetry) -> None:
    from rabbitq._ops.logs import JsonFormatter

    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    span = _deliver(tracing, {}, 1)
    with span.activate():
        TraceIds().filter(record)
    span.end("success")
    line = JsonFormatter().format(record)
    assert f'"trace_id":"{record.trace_id}"' in line and '"span_id"' in line
    outside = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    TraceIds().filter(outside)
    assert "trace_id" not in JsonFormatter().format(outside)
