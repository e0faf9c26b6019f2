"""OpenTelemetry spans for rabbitq, after the messaging semantic conventions for RabbitMQ.

- ``publish <exchange>`` (kind PRODUCER) per publish, a child of the current span; it
  writes W3C ``traceparent`` / ``tracestate`` into the message's headers.
- ``process <queue>`` (kind CONSUMER) per delivery, from arrival to settlement, a child
  of the context in the message's headers, so every attempt of a message (its retry
  copies, DLQ copy and replays keep those headers) is in the publisher's trace. It
  links to the span that sent this copy (``rabbitq-previous-span``: the failed
  attempt, or the replay) and is the current span while the handler runs, so the
  handler's own spans, logs and follow-up publishes belong to it.
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
    operation: str, kind: str, destination: str, message_id: str, correlation_id: str | None
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": "rabbitmq",
        "messaging.operation.name": operation,
        "messaging.operation.type": kind,
        "messaging.operation": kind,  # the older convention's name, still widely read
        "messaging.destination.name": destination,
        "messaging.message.id": message_id,
    }
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
    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

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
        self.span.end()


class OpenTelemetry(Tracing):
    """Spans for every publish, delivery and replay; see the module docstring.

    ``tracer_provider`` defaults to the global one; ``propagator`` to the global text
    map propagator (W3C trace context and baggage unless configured otherwise).
    """

    enabled = True

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        propagator: TextMapPropagator | None = None,
    ) -> None:
        self.tracer = trace.get_tracer(SYSTEM, _version(), tracer_provider=tracer_provider)
        self._propagator = propagator

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
        attributes = _messaging("publish", "send", exchange, message_id, correlation_id)
        attributes["messaging.rabbitmq.destination.routing_key"] = routing_key
        attributes["messaging.message.body.size"] = body_size
        attributes["rabbitq.type"] = type_name
        span = self.tracer.start_span(
            f"publish {exchange or '(default)'}", kind=SpanKind.PRODUCER, attributes=attributes
        )
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
        attributes = _messaging("replay", "send", queue, message_id, correlation_id)
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
    ) -> DeliverySpan:
        attributes = _messaging("process", "process", queue, message_id, correlation_id)
        attributes["messaging.rabbitmq.destination.routing_key"] = routing_key
        attributes["messaging.message.body.size"] = body_size
        attributes["rabbitq.type"] = type_name
        attributes["rabbitq.attempt"] = attempt
        span = self.tracer.start_span(
            f"process {queue}",
            context=self.propagator.extract(headers, getter=_GETTER),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=_previous_link(headers),
        )
        return _Delivery(span)
