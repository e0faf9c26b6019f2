"""The tracing span of one delivery, from what its headers and properties say."""

from __future__ import annotations

from .._amqp.properties import message_id_of
from ..tracing.base import DeliverySpan, Tracing
from .delivery import Incoming


def trace_delivery(
    tracing: Tracing, delivery: Incoming, queue: str, type_name: str, attempt: int
) -> DeliverySpan:
    """Start the span of ``delivery`` (its ``attempt``, read once by the worker)."""
    return tracing.deliver(
        delivery.headers or {},
        queue=queue,
        type_name=type_name,
        routing_key=delivery.routing_key or "",
        message_id=message_id_of(delivery, type_name),
        correlation_id=delivery.correlation_id,
        attempt=attempt,
        body_size=len(delivery.body),
        exchange=delivery.exchange or "",
        delivery_tag=delivery.delivery_tag,
    )
