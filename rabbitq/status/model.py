"""What happened to a message: its states, one record per event, and the pure fold of
those records into a :class:`MessageStatus` (no I/O here).

A record is written by whoever saw the event (the publisher, a worker, the DLQ tools):
``published`` -> ``received`` -> ``started`` (attempt n) -> ``succeeded`` | ``duplicate``
| ``retrying`` (then ``received`` again) | ``dead_lettered`` (then maybe ``replayed``
-> ``received`` ..., or ``purged``); ``requeued`` when a delivery went back to its queue
unsettled (shutdown, an open circuit, a copy the broker did not confirm); ``cancelled``
when ``app.cancel`` asked for it before it ran (written by the canceller, and by the
worker that acked it unrun); ``superseded`` (a debounced message a later publish
replaced) and ``deduplicated`` (a publish refused for its held unique key) end a message
too (docs/control.md). Records are
best effort (see :mod:`rabbitq.status.writer`), so the fold never insists on an order
of states: the current state is simply the latest record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

PUBLISHED = "published"
RECEIVED = "received"
STARTED = "started"
RETRYING = "retrying"
SUCCEEDED = "succeeded"
DUPLICATE = "duplicate"
DEAD_LETTERED = "dead_lettered"
REPLAYED = "replayed"
PURGED = "purged"
REQUEUED = "requeued"
CANCELLED = "cancelled"
DEDUPLICATED = "deduplicated"  # a publish not sent: its unique key was held (docs/control.md)
SUPERSEDED = "superseded"  # a debounced message acked unrun: a later one of its key came
STATES = (
    PUBLISHED, RECEIVED, STARTED, RETRYING, SUCCEEDED, DUPLICATE, DEAD_LETTERED, REPLAYED,
    PURGED, REQUEUED, CANCELLED, DEDUPLICATED, SUPERSEDED,
)  # fmt: skip
# The states after which nothing more happens unless someone acts (a replay).
FINAL = frozenset({SUCCEEDED, DUPLICATE, DEAD_LETTERED, PURGED, CANCELLED, DEDUPLICATED,
                   SUPERSEDED})  # fmt: skip
# Records with the same timestamp (one clock tick) are ordered as a message lives.
_RANK = {state: i for i, state in enumerate(STATES)}
_RANK[REQUEUED] = _RANK[RETRYING]
MAX_ERROR_CHARS = 500  # an error kept in a record is cut to this


@dataclass(slots=True)  # not frozen: three per message, and a frozen one costs 3x to make
class Record:
    """One event of one message, as written to a status store (never changed once made).

    ``at`` is seconds since the epoch (the writer's clock); ``attempt`` the delivery's
    attempt (1-based) where one applies; ``group_id`` the workflow group the message is
    a member of (its ``rabbitq-group`` header), ``callback_of`` the group whose callback
    (or ``on_failure`` message) it is (its ``rabbitq-callback-of`` header).
    """

    message_id: str
    state: str
    at: float
    attempt: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    group_id: str | None = None
    callback_of: str | None = None


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of a message's history."""

    state: str
    at: datetime
    attempt: int | None
    detail: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """As a JSON object (``at`` in ISO 8601, UTC)."""
        return {
            "state": self.state,
            "at": self.at.isoformat(),
            "attempt": self.attempt,
            "detail": dict(self.detail),
        }


@dataclass(frozen=True, slots=True)
class MessageStatus:
    """What :meth:`rabbitq.App.status` answers: the current ``state`` (the latest record's),
    the number of ``attempts`` started, and the ``history``, oldest first; the workflow
    group it is a member of (``group_id``) or whose callback it is (``callback_of``)."""

    message_id: str
    state: str
    attempts: int
    history: tuple[Entry, ...]
    group_id: str | None = None
    callback_of: str | None = None

    @property
    def final(self) -> bool:
        """Whether the message is settled: succeeded, duplicate, dead-lettered, purged or
        cancelled."""
        return self.state in FINAL

    @property
    def type_name(self) -> str | None:
        """The message's type, as its first record that names one says; else None."""
        return next((str(e.detail["type"]) for e in self.history if "type" in e.detail), None)

    def to_json(self) -> dict[str, Any]:
        """As a JSON object (what ``rabbitq status --json`` prints)."""
        return {
            "message_id": self.message_id,
            "state": self.state,
            "attempts": self.attempts,
            "group_id": self.group_id,
            "callback_of": self.callback_of,
            "history": [e.to_json() for e in self.history],
        }


def fold(message_id: str, records: Iterable[Record]) -> MessageStatus | None:
    """The status that ``records`` (of ``message_id``, in any order) describe; None if
    there are none."""
    ordered = sorted(records, key=lambda r: (r.at, _RANK.get(r.state, len(STATES))))
    if not ordered:
        return None
    attempts = max((r.attempt or 0 for r in ordered if r.state == STARTED), default=0)
    group = next((r.group_id for r in ordered if r.group_id), None)
    callback_of = next((r.callback_of for r in ordered if r.callback_of), None)
    history = tuple(
        Entry(
            state=r.state,
            at=datetime.fromtimestamp(r.at, UTC),
            attempt=r.attempt,
            detail=r.detail,
        )
        for r in ordered
    )
    return MessageStatus(
        message_id=message_id,
        state=ordered[-1].state,
        attempts=attempts,
        history=history,
        group_id=group,
        callback_of=callback_of,
    )


_LABEL = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def label_seconds(label: str) -> float | None:
    """The seconds of a retry delay label (``1s``, ``90s``, ``2m``, ``1500ms``, ``37.5s``),
    else None."""
    match = _LABEL.match(label)
    if match is None:
        return None
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def short_error(error: str | None) -> str | None:
    """``error`` cut to :data:`MAX_ERROR_CHARS` (a record stays small)."""
    if error is None or len(error) <= MAX_ERROR_CHARS:
        return error
    return error[: MAX_ERROR_CHARS - 1] + "…"


def detail_text(detail: Mapping[str, Any]) -> str:
    """A history entry's detail as one line: ``key=value`` pairs, None values left out,
    a time (``next_at``: seconds since the epoch) as ISO 8601 in UTC, to the millisecond
    (the CLI and the console show the same text)."""
    return " ".join(f"{k}={_readable(k, v)}" for k, v in detail.items() if v is not None)


def _readable(key: str, value: Any) -> Any:
    if key.endswith("_at") and isinstance(value, int | float) and not isinstance(value, bool):
        moment = datetime.fromtimestamp(value, UTC).isoformat(timespec="milliseconds")
        return moment.replace("+00:00", "Z")
    return value


def history_lines(status: MessageStatus) -> list[str]:
    """``status`` as lines of text: a summary, then one line per entry (pure)."""
    lines = [f"message {status.message_id}: {status.state} ({status.attempts} attempt(s) started)"]
    for e in status.history:
        attempt = f"#{e.attempt}" if e.attempt is not None else ""
        when = e.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        lines.append(f"{when}  {e.state:<13} {attempt:<4} {detail_text(e.detail)}".rstrip())
    return lines
