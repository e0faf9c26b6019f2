"""rabbitq's own message headers and the pure functions that write them.

They carry no ``x-`` prefix on purpose: since RabbitMQ 3.13 ``x-`` headers belong to
the broker. Values are bounded (error 1 KiB, traceback 8 KiB) so that a failing
handler cannot grow a message without limit.

A copy that rabbitq publishes (retry, DLQ, replay) never carries an ``x-`` header. The
broker interprets them when the copy is dead-lettered again: a copied ``x-death`` that
names the queue it is going back to makes RabbitMQ drop the message as a dead-letter
cycle, and a malformed one crashes a quorum queue's process on 3.10. The history stays
visible to operators in :data:`DEATHS`, a bounded summary that rabbitq writes and
validates itself (:func:`deaths`).
"""

from __future__ import annotations

import re
import traceback as _traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from .brokers import broker_owned
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
UNBLOCK = "rabbitq-unblock"  # on a replayed copy: lift its ordered key's block (operator's)
GROUP = "rabbitq-group"
CALLBACK_OF = "rabbitq-callback-of"
KEY_ID = "rabbitq-key-id"  # the key an encrypted body is under (docs/privacy.md)
DEATHS = "rabbitq-deaths"
"""Where the message was dead-lettered by the broker, most recent first: a list of
``{queue, reason, count, time?}`` tables (at most :data:`MAX_DEATHS`)."""
GROUP = "rabbitq-group"
CALLBACK_OF = "rabbitq-callback-of"
UNIQUE_KEY = "rabbitq-unique-key"  # publish(unique_for=): the key it holds (docs/control.md)
DEBOUNCE_KEY = "rabbitq-debounce-key"  # publish(debounce=): its burst's key
DEBOUNCE_EPOCH = "rabbitq-debounce-epoch"  # the key store's epoch at its publish (Redis)

SEALED_TEXT = re.compile(r"enc:([A-Za-z0-9_.-]{1,32}):([A-Za-z0-9_-]+=*)")
"""An encrypted text inside a header value (an encrypted app's error, traceback, chain:
``enc:KEY_ID:BASE64URL``, written by :mod:`rabbitq.crypto.codec`)."""

MAX_ERROR_BYTES = 1024
MAX_TRACEBACK_BYTES = 8192
MAX_DEATHS = 8
_MAX_NAME_BYTES = 255

# Written only on DLQ copies; a replay removes them again.
DLQ_ONLY = (REASON, TRACEBACK, FAILED_AT, QUEUE)


def truncate_utf8(text: str, limit: int, *, keep: str = "head") -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, marked with an ellipsis if cut."""
    raw = text.encode("utf-8", "replace")  # a lone surrogate (os.fsdecode) becomes "?"
    if len(raw) <= limit:
        return raw.decode("utf-8")
    budget = limit - len("…".encode())
    if keep == "tail":
        return "…" + raw[-budget:].decode("utf-8", "ignore")
    return raw[:budget].decode("utf-8", "ignore") + "…"


def described(text: str) -> str:
    """``text`` with each encrypted part shown as ``encrypted (key K)`` (pure)."""
    return SEALED_TEXT.sub(lambda m: f"encrypted (key {m[1]})", text)


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


def _death_entry(raw: object) -> dict[str, Any] | None:
    """One validated ``{queue, reason, count, time?}``, or None if ``raw`` is not one."""
    if not isinstance(raw, Mapping):
        return None
    queue, reason = text_header(raw, "queue"), text_header(raw, "reason")
    if not queue or not reason:
        return None
    count = raw.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        count = 1
    entry: dict[str, Any] = {
        "queue": truncate_utf8(queue, _MAX_NAME_BYTES),
        "reason": truncate_utf8(reason, _MAX_NAME_BYTES),
        "count": min(count, 2**31 - 1),
    }
    when = raw.get("time")
    if isinstance(when, datetime):
        entry["time"] = when if when.tzinfo else when.replace(tzinfo=UTC)
    return entry


def broker_deaths(headers: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The tables of the broker's ``x-death`` header as they came, newest first (what is
    not a table is left out): for showing, not for copying (see :func:`deaths`)."""
    raw = headers.get("x-death")
    return [d for d in raw if isinstance(d, Mapping)] if isinstance(raw, list) else []


def last_death(headers: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The broker's most recent dead-lettering (``x-death``'s first table), if any."""
    raw = headers.get("x-death")
    if isinstance(raw, list) and raw and isinstance(raw[0], Mapping):
        return raw[0]  # the broker keeps the most recent first
    return None


def deaths(headers: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The broker's dead-letter history of a delivery, validated and bounded.

    The entries of this delivery's ``x-death`` (what happened since the last copy) come
    first, then those of :data:`DEATHS` (what earlier copies recorded); the same
    ``(queue, reason)`` is merged by adding the counts; at most :data:`MAX_DEATHS`.
    Anything malformed (``["garbage"]``, a table without a queue) is left out.
    """
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for name in ("x-death", DEATHS):
        raw = headers.get(name)
        for item in raw if isinstance(raw, list) else ():
            entry = _death_entry(item)
            if entry is None:
                continue
            key = (entry["queue"], entry["reason"])
            if key in merged:
                merged[key]["count"] = min(merged[key]["count"] + entry["count"], 2**31 - 1)
            elif len(merged) < MAX_DEATHS:
                merged[key] = entry
    return list(merged.values())


def _carried(headers: Mapping[str, Any]) -> dict[str, Any]:
    """The headers a copy keeps: the producer's own, never the broker's (``x-``), and
    the broker's history as :data:`DEATHS`."""
    # Made wire-safe: a header that arrived must never make its copy unpublishable.
    out = {
        str(k): wire_safe(v) for k, v in headers.items() if not broker_owned(str(k)) and k != DEATHS
    }
    history = deaths(headers)
    if history:
        out[DEATHS] = history
    return out


def copy_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """The headers of a copy that adds nothing of its own (replay, import into a queue
    that dead-letters): :func:`_carried`."""
    return _carried(headers)


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
