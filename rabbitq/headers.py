"""rabbitq's own message headers and the pure functions that write them.

They carry no ``x-`` prefix on purpose: since RabbitMQ 3.13 ``x-`` headers belong to
the broker. Values are bounded (error 1 KiB, traceback 8 KiB) so that a failing
handler cannot grow a message without limit.
"""

from __future__ import annotations

import traceback as _traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from .wire import wire_safe

ATTEMPT = "rabbitq-attempt"
REASON = "rabbitq-reason"
ERROR = "rabbitq-error"
TRACEBACK = "rabbitq-traceback"
FAILED_AT = "rabbitq-failed-at"
QUEUE = "rabbitq-queue"
ORIGINAL_EXCHANGE = "rabbitq-original-exchange"
ORIGINAL_ROUTING_KEY = "rabbitq-original-routing-key"
REPLAYED = "rabbitq-replayed"

MAX_ERROR_BYTES = 1024
MAX_TRACEBACK_BYTES = 8192

# Written only on DLQ copies; a replay removes them again.
DLQ_ONLY = (REASON, TRACEBACK, FAILED_AT, QUEUE)
# Set by the broker per delivery; copying it into a new message would mislead.
_PER_DELIVERY = ("x-delivery-count",)


def truncate_utf8(text: str, limit: int, *, keep: str = "head") -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, marked with an ellipsis if cut."""
    raw = text.encode("utf-8", "replace")  # a lone surrogate (os.fsdecode) becomes "?"
    if len(raw) <= limit:
        return raw.decode("utf-8")
    budget = limit - len("…".encode())
    if keep == "tail":
        return "…" + raw[-budget:].decode("utf-8", "ignore")
    return raw[:budget].decode("utf-8", "ignore") + "…"


def format_error(exc: BaseException) -> str:
    """``ExceptionType: message``, at most 1 KiB."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return truncate_utf8(text, MAX_ERROR_BYTES)


def format_traceback(exc: BaseException) -> str:
    """The formatted traceback, at most 8 KiB; the end (where it failed) is kept.

    Each frame and each exception line is first cut to 1 KiB, so that one huge error
    message cannot push every stack frame out.
    """
    chunks = _traceback.TracebackException.from_exception(exc).format()
    text = "".join(truncate_utf8(chunk, MAX_ERROR_BYTES) for chunk in chunks)
    return truncate_utf8(text, MAX_TRACEBACK_BYTES, keep="tail")


def text_header(headers: Mapping[str, Any], name: str) -> str | None:
    """A header as text, whatever type a producer gave it; None if absent."""
    value = headers.get(name)
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _carried(headers: Mapping[str, Any]) -> dict[str, Any]:
    # Made wire-safe: a header that arrived must never make its copy unpublishable.
    return {str(k): wire_safe(v) for k, v in headers.items() if k not in _PER_DELIVERY}


def origin(headers: Mapping[str, Any], exchange: str, routing_key: str) -> dict[str, str]:
    """Where a message was first published: kept from an earlier copy, else this delivery."""
    return {
        ORIGINAL_EXCHANGE: text_header(headers, ORIGINAL_EXCHANGE) or exchange,
        ORIGINAL_ROUTING_KEY: text_header(headers, ORIGINAL_ROUTING_KEY) or routing_key,
    }


def retry_headers(
    headers: Mapping[str, Any],
    *,
    next_attempt: int,
    error: str,
    exchange: str,
    routing_key: str,
) -> dict[str, Any]:
    """Headers of a retry copy: the original's, plus the next attempt, error and origin."""
    return {
        **_carried(headers),
        **origin(headers, exchange, routing_key),
        ATTEMPT: next_attempt,
        ERROR: error,
    }


def dead_letter_headers(
    headers: Mapping[str, Any],
    *,
    reason: str,
    error: str,
    traceback: str | None,
    queue: str,
    attempt: int,
    exchange: str,
    routing_key: str,
    failed_at: datetime | None = None,
) -> dict[str, Any]:
    """Headers of a DLQ copy: the original's, plus reason, error, where and when it failed."""
    out = {
        **_carried(headers),
        **origin(headers, exchange, routing_key),
        ATTEMPT: attempt,
        REASON: reason,
        ERROR: error,
        FAILED_AT: (failed_at or datetime.now(UTC)).isoformat(timespec="milliseconds"),
        QUEUE: queue,
    }
    if traceback:
        out[TRACEBACK] = traceback
    return out
