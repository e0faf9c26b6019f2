"""What cancelling a message reports, and how long a cancellation is kept (pure).

A cancellation is kept for :data:`KEEP`: the delay ladder's longest delay (48 days,
13 h) plus the stores' default retention (7 days). A message delayed as long as the
ladder allows, then retried, or left in a backlog or in the DLQ for up to a week more,
still finds it when it arrives. It is not deleted when the message arrives: a delivery
whose ack was lost comes back, and must be acked unrun again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ..effects.store import DEFAULT_RETENTION
from ..ladder.plan import MAX_DELAY_MS
from ..status.model import (
    CANCELLED,
    DEAD_LETTERED,
    DUPLICATE,
    PURGED,
    RECEIVED,
    STARTED,
    SUCCEEDED,
    MessageStatus,
)

KEEP = MAX_DELAY_MS / 1000 + DEFAULT_RETENTION
"""Seconds a cancellation is kept (about 55.5 days)."""

# What a cancel found, per message id (CancelReport.outcome).
PENDING = "cancelled"  # not run yet: acked unrun when it arrives
RUNNING = "running"  # its handler runs: ctx.cancelled turns true
HANDLED = "already-handled"  # succeeded or a duplicate: too late
DEAD = "dead-lettered"  # in the DLQ: a replay of it is acked unrun
GONE = "purged"  # deleted from the DLQ
AGAIN = "already-cancelled"
UNKNOWN = "unknown"  # the status store has no record of it
NO_STATUS = "no-status"  # the app has no status store to ask
OUTCOMES = (PENDING, RUNNING, HANDLED, DEAD, GONE, AGAIN, UNKNOWN, NO_STATUS)


@dataclass(frozen=True, slots=True)
class CancelReport:
    """What ``app.cancel`` did for one message id: ``outcome`` (``cancelled``,
    ``running``, ``already-handled``, ``dead-lettered``, ``purged``,
    ``already-cancelled``, ``unknown`` or ``no-status``), the ``state`` the status
    store had for it and since when (``at``), and ``text``: the one line the CLI prints.
    The cancellation is recorded whatever the outcome: a copy of the message that is
    still on its way (a retry, a redelivery, a replay) is acked unrun too.

    ``durable``: whether the cancellation outlives a restart of its store (PostgreSQL;
    Redis with ``appendonly yes``); False, a restart of that Redis loses it and the
    message runs (the text says so); None, the store's settings could not be read."""

    message_id: str
    outcome: str
    text: str
    state: str | None = None
    at: datetime | None = None
    durable: bool | None = None

    @property
    def stops_it(self) -> bool:
        """Whether this cancel keeps the message from running (or asks a running one to
        stop): not when it was handled, purged or unknown to the status store."""
        return self.outcome in (PENDING, RUNNING, DEAD, AGAIN, NO_STATUS)

    def to_json(self) -> dict[str, Any]:
        """As a JSON object (``rabbitq cancel --json``)."""
        return {
            "message_id": self.message_id,
            "outcome": self.outcome,
            "state": self.state,
            "at": None if self.at is None else self.at.isoformat(),
            "text": self.text,
            "durable": self.durable,
        }


NOT_DURABLE = "; not durable: its Redis keeps no AOF (appendonly no), a restart loses it"


def with_durability(found: CancelReport, durable: bool | None) -> CancelReport:
    """``found`` saying whether its cancellation outlives a restart of the store (pure):
    the text warns when it does not, unless the cancel was too late anyway."""
    late = found.outcome in (HANDLED, GONE)
    text = found.text + NOT_DURABLE if durable is False and not late else found.text
    return replace(found, durable=durable, text=text)


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def report(message_id: str, status: MessageStatus | None, *, has_status: bool) -> CancelReport:
    """What a cancel of ``message_id`` means, given its ``status`` (None: no record;
    ``has_status`` False: the app keeps none)."""
    if not has_status:
        text = "cancelled if it arrives; its state is unknown without App(status=...)"
        return CancelReport(message_id, NO_STATUS, text)
    if status is None:
        text = "unknown: no record of it (cancelled if it arrives)"
        return CancelReport(message_id, UNKNOWN, text)
    state, at = status.state, status.history[-1].at
    outcome, text = _meaning(state, _when(at))
    return CancelReport(message_id, outcome, text, state, at)


def _meaning(state: str, when: str) -> tuple[str, str]:
    if state in (SUCCEEDED, DUPLICATE):
        return HANDLED, f"already handled at {when}: not cancelled"
    if state == PURGED:
        return GONE, f"already purged from the DLQ at {when}"
    if state == CANCELLED:
        return AGAIN, f"already cancelled at {when}"
    if state == DEAD_LETTERED:
        return DEAD, f"in the DLQ since {when}: cancelled (a replay of it is acked unrun)"
    if state in (STARTED, RECEIVED):
        return RUNNING, f"running since {when}: ctx.cancelled is set; it stops if it checks"
    return PENDING, f"cancelled: it was {state} at {when}; it will be acked unrun"


def pending(reports: Mapping[str, CancelReport]) -> list[str]:
    """The ids whose status should say ``cancelled`` now (not yet run, not running)."""
    return [mid for mid, r in reports.items() if r.outcome == PENDING]
