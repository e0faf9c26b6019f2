"""OpenTelemetry spans for rabbitq, after the messaging semantic conventions for RabbitMQ
(semconv 1.44 by default; the older names on request: rabbitq.tracing.semconv).

- ``send <exchange>:<routing key>`` (kind PRODUCER) per publish, a child of the current
  span; it writes W3C ``traceparent`` / ``tracestate`` into the message's headers.
- ``process <exchange>:<routing key>:<queue>`` (kind CONSUMER) per delivery, from
  arrival to settlement, a child of the context in the message's headers, so every
  attempt of a message (its retry copies, DLQ copy and replays keep those headers) is in
  the publisher's trace. It links to the span that sent this copy
  (``rabbitq-previous-span``: the failed attempt, or the replay) and is the current span
  while the handler runs, so the handler's own spans, logs and follow-up publishes
  belong to it.
- ``ack <destination>`` / ``nack <destination>`` (kind CLIENT, operation type
  ``settle``) as the delivery is settled, a child of its process span: ``ack`` once its
  outcome is safe (handled, or its retry or DLQ copy confirmed), ``nack`` when it goes
  back to its queue. Acks are coalesced: the span marks the ack handed on, not the
  broker's receipt.
- ``replay <queue>`` (kind PRODUCER) per replayed DLQ message, in the message's trace,
  linked to the attempt that dead-lettered it.
- The retry decision is an event ``rabbitq.retry`` (tier, next attempt, deferred by
  RetryLater) and the dead letter an event ``rabbitq.dead_letter`` plus the attribute
  ``rabbitq.dead_letter.reason``; a failed attempt sets the span's status to ERROR.

Off unless you pass ``App(tracing=OpenTelemetry())``; spans go to the global
TracerProvider (or the one given), which the OpenTelemetry SDK or
``opentelemetry-instrument`` configures. Needs ``pip install 'rabbitq[otel]'``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter, TextMapPropagator
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..settings import semconv_opt_in
from . import semconv
from .base import PREVIOUS_SPAN, DeliverySpan, SendSpan, Tracing

SYSTEM = "rabbitq"
_W3C = TraceContextTextMapPropagator()


def _version() -> str:
    try:
        return version("rabbitq")
    except PackageNotFoundError:
        return "0+unknown"


class _HeaderGetter(Getter[Mapping[str, Any]]):
    """Reads AMQP headers, whose values may be bytes or anything a producer sent."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            return None
        if isinstance(value, bytes | bytearray):
            value = bytes(value).decode("ascii", "replace")
        return [str(value)]

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [str(k) for k in carrier]


_GETTER = _HeaderGetter()


def _traceparent(span: trace.Span) -> str | None:
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def _previous_link(headers: Mapping[str, Any]) -> list[Link]:
    """The link to the span that sent this copy, if the headers name one."""
    value = _GETTER.get(headers, PREVIOUS_SPAN)
    if not value:
        return []
    ctx = trace.get_current_span(_W3C.extract({"traceparent": value[0]})).get_span_context()
    if not ctx.is_valid:
        return []
    return [Link(ctx, {"rabbitq.link": "previous"})]


def _messaging(
    operation: str,
    kind: str,
    destination: str,
    message_id: str,
    correlation_id: str | None,
    conventions: semconv.Conventions,
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": "rabbitmq",
        "messaging.operation.name": operation,
        "messaging.operation.type": kind,
        "messaging.destination.name": destination,
        "messaging.message.id": message_id,
    }
    if conventions != semconv.CURRENT:
        attributes["messaging.operation"] = kind  # the older convention's name
    if correlation_id:
        attributes["messaging.message.conversation_id"] = correlation_id
    return attributes


class _Send(SendSpan):
    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def end(self, error: BaseException | None = None) -> None:
        if error is not None:
            self.span.record_exception(error)
            self.span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            self.span.set_attribute("error.type", type(error).__name__)
        self.span.end()


class _Delivery(DeliverySpan):
    __slots__ = ("settle", "span")

    def __init__(self, span: trace.Span, settle: _Settle | None) -> None:
        self.span = span
        self.settle = settle

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        token = otel_context.attach(trace.set_span_in_context(self.span))
        try:
            yield
        finally:
            otel_context.detach(token)

    def copied(self, headers: dict[str, Any]) -> None:
        previous = _traceparent(self.span)
        if previous:
            headers[PREVIOUS_SPAN] = previous

    def retried(self, delay: str, next_attempt: int, deferred: bool, error: str | None) -> None:
        self.span.add_event(
            "rabbitq.retry",
            {
                "rabbitq.retry.delay": delay,
                "rabbitq.retry.next_attempt": next_attempt,
                "rabbitq.retry.deferred": deferred,
                "exception.message": error or "",
            },
        )

    def dead_lettered(self, reason: str, error: str | None) -> None:
        self.span.set_attribute("rabbitq.dead_letter.reason", reason)
        self.span.add_event(
            "rabbitq.dead_letter",
            {"rabbitq.dead_letter.reason": reason, "exception.message": error or ""},
        )

    def end(self, outcome: str, error: str | None = None) -> None:
        self.span.set_attribute("rabbitq.outcome", outcome)
        if error:
            self.span.set_status(Status(StatusCode.ERROR, error))
            self.span.set_attribute("error.type", error.split(":", 1)[0])
        if self.settle is not None:
            self.settle.span(self.span, semconv.settle_operation(outcome))
        self.span.end()


class _Settle:
    """What the settle span of one delivery is made of (the current conventions):
    ``destination`` as span names have it, ``attributes`` the delivery's messaging ones."""

    __slots__ = ("attributes", "destination", "tracer")

    def __init__(self, tracer: trace.Tracer, destination: str, attributes: dict[str, Any]):
        self.tracer = tracer
        self.destination = destination
        self.attributes = attributes

    def span(self, parent: trace.Span, operation: str) -> None:
        """``ack <destination>`` or ``nack <destination>``, a child of ``parent``."""
        attributes = {
            **self.attributes,
            "messaging.operation.name": operation,
            "messaging.operation.type": "settle",
        }
        self.tracer.start_span(
            f"{operation} {self.destination}",
            context=trace.set_span_in_context(parent),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        ).end()


class OpenTelemetry(Tracing):
    """Spans for every publish, delivery and replay; see the module docstring.

    ``tracer_provider`` defaults to the global one; ``propagator`` to the global text
    map propagator (W3C trace context and baggage unless configured otherwise).
    ``conventions``: ``"current"`` (semconv 1.44's names), ``"both"`` (those and the
    older attributes that have no current counterpart) or ``"previous"`` (the spans of
    rabbitq before: ``publish <exchange>``, ``process <queue>``, no settle span);
    None (the default) reads ``$OTEL_SEMCONV_STABILITY_OPT_IN``: ``messaging/dup`` is
    ``"both"``, anything else ``"current"`` (rabbitq.tracing.semconv).
    """

    enabled = True

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        propagator: TextMapPropagator | None = None,
        conventions: semconv.Conventions | None = None,
    ) -> None:
        self.tracer = trace.get_tracer(SYSTEM, _version(), tracer_provider=tracer_provider)
        self._propagator = propagator
        self.conventions: semconv.Conventions = (
            semconv.from_opt_in(semconv_opt_in())
            if conventions is None
            else semconv.check(conventions)
        )

    @property
    def propagator(self) -> TextMapPropagator:
        """The propagator in use (the global one is looked up on each use)."""
        return self._propagator or propagate.get_global_textmap()

    def publish(
        self,
        headers: dict[str, Any],
        *,
        exchange: str,
        routing_key: str,
        type_name: str,
        message_id: str,
        correlation_id: str | None,
        body_size: int,
    ) -> SendSpan:
        if self.conventions == semconv.PREVIOUS:
            operation, destination = "publish", exchange
            name = f"publish {exchange or '(default)'}"
        else:
            operation = "send"
            destination = semconv.send_destination(exchange, routing_key)
            key = semconv.span_key(exchange, routing_key)
            name = f"send {semconv.send_destination(exchange, key)}"
        attributes = _messaging(
            operation, "send", destination, message_id, correlation_id, self.conventions
        )
        if routing_key:
            attributes["messaging.rabbitmq.destination.routing_key"] = routing_key
        attributes["messaging.message.body.size"] = body_size
        attributes["rabbitq.type"] = type_name
        span = self.tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attributes)
        self.propagator.inject(headers, context=trace.set_span_in_context(span))
        return _Send(span)

    def replay(
        self,
        headers: dict[str, Any],
        *,
        queue: str,
        message_id: str,
        correlation_id: str | None,
    ) -> SendSpan:
        # sent to the default exchange with the queue's name: destination ``queue``
        attributes = _messaging(
            "replay", "send", queue, message_id, correlation_id, self.conventions
        )
        if self.conventions != semconv.PREVIOUS:
            attributes["messaging.rabbitmq.destination.routing_key"] = queue
        span = self.tracer.start_span(
            f"replay {queue}",
            context=self.propagator.extract(headers, getter=_GETTER),
            kind=SpanKind.PRODUCER,
            attributes=attributes,
            links=_previous_link(headers),
        )
        previous = _traceparent(span)
        if previous:
            headers[PREVIOUS_SPAN] = previous
        return _Send(span)

    def deliver(
        self,
        headers: Mapping[str, Any],
        *,
        queue: str,
        type_name: str,
        routing_key: str,
        message_id: str,
        correlation_id: str | None,
        attempt: int,
        body_size: int,
        exchange: str = "",
        delivery_tag: int | None = None,
    ) -> DeliverySpan:
        previous = self.conventions == semconv.PREVIOUS
        destination = (
            queue if previous else semconv.receive_destination(exchange, routing_key, queue)
        )
        attributes = _messaging(
            "process", "process", destination, message_id, correlation_id, self.conventions
        )
        if routing_key:
            attributes["messaging.rabbitmq.destination.routing_key"] = routing_key
        name = destination
        settle = None
        if not previous:
            if delivery_tag is not None:
                attributes["messaging.rabbitmq.message.delivery_tag"] = delivery_tag
            key = semconv.span_key(exchange, routing_key)
            name = semconv.receive_destination(exchange, key, queue)
            settle = _Settle(self.tracer, name, dict(attributes))
        attributes["messaging.message.body.size"] = body_size
        attributes["rabbitq.type"] = type_name
        attributes["rabbitq.attempt"] = attempt
        span = self.tracer.start_span(
            f"process {name}",
            context=self.propagator.extract(headers, getter=_GETTER),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=_previous_link(headers),
        )
        return _Delivery(span, settle)
