"""Trace and span ids on log records, so a log line can be found from its trace.

:class:`TraceIds` is a :class:`logging.Filter`: add it to a handler and every record
gets ``trace_id`` and ``span_id`` (hex, or empty outside a span) from OpenTelemetry's
current span; rabbitq's ``--log-json`` output writes them when they are set. Without
the ``otel`` extra both stay empty.
"""

from __future__ import annotations

import logging

try:
    from opentelemetry import trace as _trace
except ImportError:  # the otel extra is not installed
    _trace = None  # type: ignore[assignment]


class TraceIds(logging.Filter):
    """Sets ``record.trace_id`` and ``record.span_id`` from the current span."""

    def filter(self, record: logging.LogRecord) -> bool:
        trace_id = span_id = ""
        if _trace is not None:
            ctx = _trace.get_current_span().get_span_context()
            if ctx.is_valid:
                trace_id = _trace.format_trace_id(ctx.trace_id)
                span_id = _trace.format_span_id(ctx.span_id)
        record.trace_id = trace_id
        record.span_id = span_id
        return True
