"""Tracing of publish, delivery, retry, dead letter and replay (``rabbitq[otel]``).

``base.py`` is the observer the worker calls (a no-op by default); ``otel.py`` makes
OpenTelemetry spans that follow the messaging semantic conventions for RabbitMQ;
``logs.py`` puts the current trace and span ids on log records. See docs/providers.md.
The package exports :class:`OpenTelemetry`, :class:`TraceIds` and :class:`Tracing` (the
type of ``App(tracing=...)``); the header names and span types are internal, imported
from ``rabbitq.tracing.base``.
"""

from .base import Tracing
from .logs import TraceIds

__all__ = ["OpenTelemetry", "TraceIds", "Tracing"]


def __getattr__(name: str) -> object:
    # OpenTelemetry is imported only when asked for: the extra may not be installed.
    if name == "OpenTelemetry":
        try:
            from .otel import OpenTelemetry
        except ImportError as exc:  # one line that says which extra, as rabbitq.effects
            raise ImportError(
                "rabbitq.tracing.OpenTelemetry needs the 'otel' extra: "
                f"pip install 'rabbitq[otel]' ({exc.name or exc} missing)",
                name=exc.name,
            ) from exc
        return OpenTelemetry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
