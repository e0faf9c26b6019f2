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
        exchange="rabbitq",
        delivery_tag=7,
    )


def _not_settle(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    """The finished spans but the settle spans (ack, nack: kind CLIENT)."""
    return [s for s in exporter.get_finished_spans() if s.kind != SpanKind.CLIENT]


SEND = "send rabbitq:email.send"
PROCESS = "process rabbitq:email.send:emails"


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

    spans = {s.name + str(i): s for i, s in enumerate(_not_settle(exporter))}
    names = [s.name for s in _not_settle(exporter)]
    assert names == [SEND, PROCESS, PROCESS, "replay emails", "send rabbitq:email.sent", PROCESS]
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


def _publish_and_deliver(tracing: OpenTelemetry, outcome: str = "success") -> None:
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
    _deliver(tracing, headers, 3).end(outcome)


def test_spans_carry_the_current_messaging_conventions_for_rabbitmq_by_default(
    tracing: OpenTelemetry, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    _publish_and_deliver(tracing)
    producer, settle, consumer = exporter.get_finished_spans()
    assert (producer.name, producer.kind) == (SEND, SpanKind.PRODUCER)
    common = {
        "messaging.system": "rabbitmq",
        "messaging.message.id": "m1",
        "messaging.message.conversation_id": "c1",
        "messaging.rabbitmq.destination.routing_key": "email.send",
    }
    assert dict(producer.attributes or {}) == {
        **common,
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": "rabbitq:email.send",
        "messaging.message.body.size": 10,
        "rabbitq.type": "email.send",
    }
    assert (consumer.name, consumer.kind) == (PROCESS, SpanKind.CONSUMER)
    assert dict(consumer.attributes or {}) == {
        **common,
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "rabbitq:email.send:emails",
        "messaging.message.body.size": 10,
        "rabbitq.type": "email.send",
        "messaging.rabbitmq.message.delivery_tag": 7,
        "rabbitq.attempt": 3,
        "rabbitq.outcome": "success",
    }
    # settling: a span of its own, a child of the delivery's
    assert (settle.name, settle.kind) == ("ack rabbitq:email.send:emails", SpanKind.CLIENT)
    assert settle.parent is not None and settle.parent.span_id == consumer.context.span_id
    assert dict(settle.attributes or {}) == {
        **common,
        "messaging.operation.name": "ack",
        "messaging.operation.type": "settle",
        "messaging.destination.name": "rabbitq:email.send:emails",
        "messaging.rabbitmq.message.delivery_tag": 7,
    }
    # the opt-in variable's "messaging" (the stable names) changes nothing here
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http,messaging")
    assert OpenTelemetry().conventions == "current"


@pytest.mark.parametrize(
    ("outcome", "operation"),
    [("success", "ack"), ("retried", "ack"), ("dead_lettered", "ack"), ("requeued", "nack")],
)
def test_a_delivery_is_settled_by_an_ack_once_its_outcome_is_safe_else_a_nack(
    tracing: OpenTelemetry, exporter: InMemorySpanExporter, outcome: str, operation: str
) -> None:
    _deliver(tracing, {}, 1).end(outcome)
    (settle,) = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert settle.name == f"{operation} rabbitq:email.send:emails"
    assert (settle.attributes or {})["messaging.operation.name"] == operation


def test_messaging_dup_in_the_opt_in_variable_adds_the_older_attributes(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http, messaging/dup")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = OpenTelemetry(tracer_provider=provider)
    assert tracing.conventions == "both"
    _publish_and_deliver(tracing)
    producer, settle, consumer = exporter.get_finished_spans()
    assert (producer.name, settle.name, consumer.name) == (
        SEND,
        "ack rabbitq:email.send:emails",
        PROCESS,
    )
    assert (producer.attributes or {})["messaging.operation"] == "send"
    assert (consumer.attributes or {})["messaging.operation"] == "process"
    assert (consumer.attributes or {})["messaging.destination.name"] == "rabbitq:email.send:emails"


def test_the_previous_conventions_are_the_spans_of_rabbitq_before(
    exporter: InMemorySpanExporter,
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _publish_and_deliver(OpenTelemetry(tracer_provider=provider, conventions="previous"))
    producer, consumer = exporter.get_finished_spans()  # no settle span
    assert producer.name == "publish rabbitq" and consumer.name == "process emails"
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
    assert "messaging.rabbitmq.message.delivery_tag" not in attrs  # as before
    assert attrs["messaging.operation"] == "process"
    assert attrs["messaging.destination.name"] == "emails"
    assert attrs["rabbitq.attempt"] == 3


def test_a_delayed_message_is_named_without_its_delays_bits_in_span_names(
    tracing: OpenTelemetry, exporter: InMemorySpanExporter
) -> None:
    ladder, bits = "rabbitq.delay.classic.03", "1.0.0.1.0"
    headers: dict[str, Any] = {}
    tracing.publish(
        headers,
        exchange=ladder,
        routing_key=bits,
        type_name="email.send",
        message_id="m1",
        correlation_id=None,
        body_size=1,
    ).end()
    tracing.deliver(
        headers,
        queue="emails",
        type_name="email.send",
        routing_key=bits,
        message_id="m1",
        correlation_id=None,
        attempt=1,
        body_size=1,
        exchange="rabbitq.delay.deliver",
    ).end("success")
    producer, settle, consumer = exporter.get_finished_spans()
    assert producer.name == f"send {ladder}"
    assert (producer.attributes or {})["messaging.destination.name"] == f"{ladder}:{bits}"
    assert consumer.name == "process rabbitq.delay.deliver:emails"
    assert settle.name == "ack rabbitq.delay.deliver:emails"
    dest = (consumer.attributes or {})["messaging.destination.name"]
    assert dest == f"rabbitq.delay.deliver:{bits}:emails"


def test_unknown_conventions_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="conventions must be one of 'current', 'both'"):
        OpenTelemetry(conventions="newest")  # type: ignore[arg-type]


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
    (span,) = _not_settle(exporter)
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"] == "RuntimeError"


def test_a_delivery_without_trace_headers_starts_a_trace_of_its_own(
    tracing: OpenTelemetry, exporter: InMemorySpanExporter
) -> None:
    _deliver(tracing, {PREVIOUS_SPAN: "garbage", TRACEPARENT: 12}, 1).end("success")
    (span,) = _not_settle(exporter)
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
    (finished,) = _not_settle(exporter)
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
