"""Which messaging semantic conventions the spans follow, and the names they give (pure).

OpenTelemetry's messaging conventions (semconv 1.44) name a RabbitMQ destination from
its parts: ``{exchange}:{routing key}`` on send and ``{exchange}:{routing key}:{queue}``
on receive and process, empty parts left out, the routing key left out where it is the
queue's name, and ``amq.default`` for the default exchange with nothing else known.
Spans are named ``{operation} {destination}`` (``send emails:email.send``,
``process emails:email.send:emails``; the delay ladder's routing keys, a delay's
bits, are left out of span names); settling a delivery is a span of its own
(``ack ...``, ``nack ...``; operation type ``settle``).

rabbitq's spans before followed an older convention: ``messaging.destination.name`` the
exchange on publish and the queue on delivery, spans ``publish <exchange>`` and
``process <queue>``, the attribute ``messaging.operation``, no settle span. Which one:

- :data:`CURRENT` (the default): the 1.44 names. The spec asks instrumentations that
  emitted an older convention to keep it by default until the messaging conventions are
  stable; rabbitq's users asked for the current ones (issue 41), and the old ones stay
  one setting away.
- :data:`BOTH`: ``OTEL_SEMCONV_STABILITY_OPT_IN`` lists ``messaging/dup`` (the spec's
  value for a transition): the current names, plus the older convention's attributes
  that have no current counterpart (``messaging.operation``). Where the two give one
  attribute or the span's name different values, a span can carry only one: the
  current one.
- :data:`PREVIOUS`: ``OpenTelemetry(conventions="previous")``: the spans exactly as
  before, for dashboards and queries written against them.
"""

from __future__ import annotations

from typing import Literal

Conventions = Literal["current", "both", "previous"]
CURRENT: Conventions = "current"
BOTH: Conventions = "both"
PREVIOUS: Conventions = "previous"
CONVENTIONS: tuple[Conventions, ...] = (CURRENT, BOTH, PREVIOUS)
DUP = "messaging/dup"
"""The ``OTEL_SEMCONV_STABILITY_OPT_IN`` value that asks for both conventions."""
DEFAULT_EXCHANGE = "amq.default"
LADDER = "rabbitq.delay."
"""The delay ladder's exchanges' prefix (rabbitq.ladder.plan.PREFIX): their routing keys
are a delay's bits, one per delay, so span names leave them out."""


def from_opt_in(value: str) -> Conventions:
    """The conventions an ``OTEL_SEMCONV_STABILITY_OPT_IN`` value asks for: its
    comma-separated list names ``messaging/dup`` (both) or not (the current ones;
    ``messaging`` and other categories' values change nothing here)."""
    items = {item.strip() for item in value.split(",")}
    return BOTH if DUP in items else CURRENT


def check(conventions: str) -> Conventions:
    """``OpenTelemetry(conventions=...)``: one of :data:`CONVENTIONS`."""
    for known in CONVENTIONS:
        if conventions == known:
            return known
    raise ValueError(
        f"conventions must be one of {', '.join(map(repr, CONVENTIONS))}, not {conventions!r}"
    )


def send_destination(exchange: str, routing_key: str) -> str:
    """``messaging.destination.name`` of a publish to ``exchange`` with ``routing_key``."""
    return ":".join(p for p in (exchange, routing_key) if p) or DEFAULT_EXCHANGE


def receive_destination(exchange: str, routing_key: str, queue: str) -> str:
    """``messaging.destination.name`` of a delivery from ``queue`` that was published to
    ``exchange`` with ``routing_key`` (the routing key left out where it is the queue's
    name: a message sent straight to its queue, as retries are)."""
    key = "" if routing_key == queue else routing_key
    return ":".join(p for p in (exchange, key, queue) if p) or DEFAULT_EXCHANGE


def span_key(exchange: str, routing_key: str) -> str:
    """The routing key as a span's name has it: none for the delay ladder's exchanges
    (a key per delay would make a span name per delay; the attribute keeps it)."""
    return "" if exchange.startswith(LADDER) else routing_key


def settle_operation(outcome: str) -> str:
    """The settle span's ``messaging.operation.name`` for a delivery settled as
    ``outcome``: ``nack`` for one returned to its queue, else ``ack`` (a retry or a dead
    letter acks the original once its copy is confirmed)."""
    return "nack" if outcome == "requeued" else "ack"
