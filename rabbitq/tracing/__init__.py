"""Tracing of publish, delivery, retry, dead letter and replay (``rabbitq[otel]``).

``base.py`` is the observer the worker calls (a no-op by default); ``otel.py`` makes
OpenTelemetry spans that follow the messaging semantic conventions for RabbitMQ;
``logs.py`` puts the current trace and span ids on log records. See docs/providers.md.
"""

from .base import (
    NO_TRACING,
    PREVIOUS_SPAN,
    TRACEPARENT,
    TRACESTATE,
    DeliverySpan,
    SendSpan,
    Tracing,
)
from .logs import TraceIds

__all__ = [
    "NO_TRACING",
    "PREVIOUS_SPAN",
    "TRACEPARENT",
    "TRACESTATE",
    "DeliverySpan",
    "OpenTelemetry",
    "SendSpan",
    "TraceIds",
    "Tracing",
]


def __getattr__(name: str) -> object:
    # OpenTelemetry is imported only when asked for: the extra may not be installed.
    if name == "OpenTelemetry":
        from .otel import OpenTelemetry

        return OpenTelemetry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
