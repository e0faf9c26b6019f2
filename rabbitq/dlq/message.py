"""A dead message, read from a DLQ or an export file, and what can be decided about it
without I/O: its reason, origin and failure time, and the filters that select it. The
copy that a replay publishes is :func:`rabbitq._amqp.copy.replay`'s.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from aio_pika.abc import AbstractIncomingMessage

from .._amqp import headers as h
from .._amqp.topology import DLQ_SUFFIX, dlq_name
from ..errors import DlqError
from ..ladder.plan import DELAY_TO, UNDELIVERABLE
from ..retry import parse_attempt
from . import file as dlq_file

BROKER_REASON = "broker:"
# Headers the broker changes each time a DLQ is read (quorum queues count deliveries):
# left out of :attr:`DeadMessage.key`, so that reading a message does not change it.
_VOLATILE_HEADERS = frozenset({"x-delivery-count"})


def resolve_dlq(queue: str) -> str:
    """The DLQ of ``queue`` (``emails`` -> ``emails.dlq``); a name ending in ``.dlq``, or
    the delay ladder's catch-all ``rabbitq.delay.undeliverable``, is taken as it is."""
    if queue == UNDELIVERABLE or queue.endswith(DLQ_SUFFIX):
        return queue
    return dlq_name(queue)


def reason_of(headers: Mapping[str, Any]) -> str:
    """``rabbitq-reason``; for a message the broker dead-lettered itself,
    ``broker:<x-death reason>``; empty if neither is there."""
    if reason := h.text_header(headers, h.REASON):
        return reason
    death = h.last_death(headers)
    if death is not None:
        return BROKER_REASON + (h.text_header(death, "reason") or "unknown")
    return ""


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        try:
            return _parse_time(datetime.fromisoformat(value.strip().replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def failed_at_of(headers: Mapping[str, Any], timestamp: datetime | None) -> datetime | None:
    """When it failed: ``rabbitq-failed-at``, else the broker's ``x-death`` time, else the
    message's ``timestamp``."""
    if (when := _parse_time(headers.get(h.FAILED_AT))) is not None:
        return when
    death = h.last_death(headers)
    if death is not None and (when := _parse_time(death.get("time"))) is not None:
        return when
    return _parse_time(timestamp)


def origin_of(headers: Mapping[str, Any], dlq: str) -> str | None:
    """The queue the message failed in: ``rabbitq-queue``, else the queue in its latest
    ``x-death``, else the DLQ's name without ``.dlq``. In the delay ladder's catch-all:
    the queue it was delayed for (``rabbitq-delay-to``), not the level it waited in."""
    if dlq == UNDELIVERABLE and (queue := h.text_header(headers, DELAY_TO)):
        return queue
    if queue := h.text_header(headers, h.QUEUE):
        return queue
    death = h.last_death(headers)
    if death is not None and (queue := h.text_header(death, "queue")):
        return queue
    if dlq.endswith(DLQ_SUFFIX) and len(dlq) > len(DLQ_SUFFIX):
        return dlq[: -len(DLQ_SUFFIX)]
    return None


@dataclass(frozen=True, kw_only=True)
class DeadMessage:
    """One message read from a DLQ: its body, properties and headers, and what they say."""

    dlq: str
    body: bytes
    properties: dict[str, Any]
    headers: dict[str, Any]
    exchange: str = ""
    routing_key: str = ""
    redelivered: bool = False

    @classmethod
    def from_delivery(cls, delivery: AbstractIncomingMessage, dlq: str) -> DeadMessage:
        """Everything a delivery carries that a copy of it must keep."""
        seconds = delivery.expiration  # aio-pika gives seconds; the wire has milliseconds
        expiration = str(round(seconds * 1000)) if isinstance(seconds, int | float) else None
        properties = {
            "content_type": delivery.content_type,
            "content_encoding": delivery.content_encoding,
            "delivery_mode": int(delivery.delivery_mode),
            "priority": delivery.priority,
            "correlation_id": delivery.correlation_id,
            "reply_to": delivery.reply_to,
            "expiration": expiration,
            "message_id": delivery.message_id,
            "timestamp": delivery.timestamp,
            "type": delivery.type,
            "user_id": delivery.user_id,
            "app_id": delivery.app_id,
        }
        return cls(
            dlq=dlq,
            body=delivery.body,
            properties={k: v for k, v in properties.items() if v is not None},
            headers=dict(delivery.headers or {}),
            exchange=delivery.exchange or "",
            routing_key=delivery.routing_key or "",
            redelivered=bool(delivery.redelivered),
        )

    @classmethod
    def from_record(cls, record: dlq_file.Record, dlq: str) -> DeadMessage:
        """A message read back from an export file."""
        return cls(
            dlq=dlq,
            body=record.body,
            properties=dict(record.properties),
            headers=dict(record.headers),
            exchange=record.exchange,
            routing_key=record.routing_key,
        )

    def record(self) -> dlq_file.Record:
        """This message as a line of an export file."""
        return dlq_file.Record(
            queue=self.dlq,
            body=self.body,
            properties=self.properties,
            headers=self.headers,
            exchange=self.exchange,
            routing_key=self.routing_key,
        )

    @property
    def key(self) -> str:
        """A digest of this exact copy (body, properties, headers, minus what reading
        changes): the same on every read, different for a later copy with the same
        ``message_id`` (a replayed message that failed again carries a new
        ``rabbitq-failed-at``). :attr:`Filters.keys` selects messages by it, so that an
        operation touches only the copies a person was shown."""
        stable = {k: v for k, v in self.headers.items() if k not in _VOLATILE_HEADERS}
        line = dlq_file.dumps(replace(self, headers=stable).record())
        return hashlib.sha256(line).hexdigest()[:24]

    @property
    def message_id(self) -> str | None:
        """The ``message_id`` property, if set."""
        return self.properties.get("message_id")

    @property
    def type(self) -> str | None:
        """The ``type`` property, if set."""
        return self.properties.get("type")

    @property
    def timestamp(self) -> datetime | None:
        """The ``timestamp`` property, if set."""
        return self.properties.get("timestamp")

    @property
    def correlation_id(self) -> str | None:
        """The ``correlation_id`` property, if set."""
        return self.properties.get("correlation_id")

    @property
    def reason(self) -> str:
        """See :func:`reason_of`."""
        return reason_of(self.headers)

    @property
    def attempt(self) -> int | None:
        """The attempt that failed last (``rabbitq-attempt``), if known."""
        value = self.headers.get(h.ATTEMPT)
        return None if value is None else parse_attempt(value)

    @property
    def failed_at(self) -> datetime | None:
        """See :func:`failed_at_of`."""
        return failed_at_of(self.headers, self.timestamp)

    @property
    def error(self) -> str | None:
        """``rabbitq-error``: ``ExceptionType: message``."""
        return h.text_header(self.headers, h.ERROR)

    @property
    def traceback(self) -> str | None:
        """``rabbitq-traceback``."""
        return h.text_header(self.headers, h.TRACEBACK)

    @property
    def origin(self) -> str | None:
        """See :func:`origin_of`."""
        return origin_of(self.headers, self.dlq)

    def summary(self, now: datetime | None = None) -> dict[str, Any]:
        """The fields ``rabbitq dlq list`` shows, as JSON-ready data."""
        failed = self.failed_at
        age = None if failed is None else ((now or datetime.now(UTC)) - failed).total_seconds()
        return {
            "message_id": self.message_id,
            "type": self.type,
            "reason": self.reason,
            "attempts": self.attempt,
            "failed_at": failed.isoformat() if failed else None,
            "age_seconds": None if age is None else round(age, 3),
            "queue": self.origin,
            "error": self.error,
            "redelivered": self.redelivered,
        }


# ---------------------------------------------------------------- filters (pure)

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_when(text: str, *, now: datetime | None = None) -> datetime:
    """``2024-05-01``, ``2024-05-01T10:00:00+02:00`` (no offset = UTC), or an age such
    as ``90s``, ``15m``, ``2h``, ``3d``, ``1w`` (that long before ``now``)."""
    text = text.strip()
    if match := _RELATIVE.match(text):
        seconds = float(match[1]) * _UNIT_SECONDS[match[2]]
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    when = _parse_time(text)
    if when is None:
        raise DlqError(
            f"cannot read the time {text!r}: give an ISO 8601 date or time "
            "(2024-05-01, 2024-05-01T10:00:00Z) or an age (90s, 15m, 2h, 3d)"
        )
    return when


@dataclass(frozen=True, kw_only=True)
class Filters:
    """Which DLQ messages an operation applies to; every given criterion must hold.

    Within one criterion any value matches (``types={"a", "b"}``: type a or b). A
    message without the field a criterion looks at does not match it.
    """

    types: frozenset[str] = frozenset()
    reasons: frozenset[str] = frozenset()
    message_ids: frozenset[str] = frozenset()
    # DeadMessage.key values: exactly these copies (an operation on what a page showed).
    keys: frozenset[str] = frozenset()
    since: datetime | None = None
    until: datetime | None = None
    grep: re.Pattern[str] | None = None

    @classmethod
    def build(
        cls,
        *,
        types: Iterable[str] = (),
        reasons: Iterable[str] = (),
        message_ids: Iterable[str] = (),
        keys: Iterable[str] = (),
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        grep: str | None = None,
    ) -> Filters:
        """Filters from user input; bad times or patterns raise :class:`DlqError`."""
        pattern = None
        if grep is not None:
            try:
                pattern = re.compile(grep)
            except re.error as exc:
                raise DlqError(
                    f"--grep {grep!r} is not a valid regular expression ({exc})"
                ) from None
        return cls(
            types=frozenset(types),
            reasons=frozenset(reasons),
            message_ids=frozenset(message_ids),
            keys=frozenset(keys),
            since=parse_when(since) if isinstance(since, str) else since,
            until=parse_when(until) if isinstance(until, str) else until,
            grep=pattern,
        )

    @property
    def active(self) -> bool:
        """Whether any criterion is set (else every message matches)."""
        return bool(
            self.types
            or self.reasons
            or self.message_ids
            or self.keys
            or self.since
            or self.until
            or self.grep is not None
        )

    def matches(self, m: DeadMessage) -> bool:
        """Whether ``m`` meets every criterion."""
        if self.types and m.type not in self.types:
            return False
        if self.reasons and m.reason not in self.reasons:
            return False
        if self.message_ids and m.message_id not in self.message_ids:
            return False
        if self.keys and m.key not in self.keys:
            return False
        if self.since is not None or self.until is not None:
            when = m.failed_at
            if when is None:
                return False
            if self.since is not None and when < self.since:
                return False
            if self.until is not None and when >= self.until:
                return False
        if self.grep is not None:  # an encrypted text as "encrypted (key K)", not its bytes
            error = m.error
            if error is None or not self.grep.search(h.described(error)):
                return False
        return True

    def describe(self) -> str:
        """The criteria in words, for messages to the operator ('' when none)."""
        parts: list[str] = []
        for label, values in (
            ("type", self.types),
            ("reason", self.reasons),
            ("message_id", self.message_ids),
        ):
            if values:
                parts.append(f"{label} {' or '.join(sorted(values))}")
        if self.keys:
            parts.append(f"one of {len(self.keys)} copies shown")
        if self.since:
            parts.append(f"failed at or after {self.since.isoformat(timespec='seconds')}")
        if self.until:
            parts.append(f"failed before {self.until.isoformat(timespec='seconds')}")
        if self.grep is not None:
            parts.append(f"error matching /{self.grep.pattern}/")
        return ", ".join(parts)
