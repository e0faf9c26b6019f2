"""What one delivery comes to, in one place: the decisions (:class:`Ack`,
:class:`Retry`, :class:`DeadLetter`, :class:`Requeue`) and the :class:`Outcome` that
carries one with what the copy, the log and the metrics need to know.

Pure data. The worker settles an outcome with the broker (``rabbitq.worker``);
``rabbitq.testing`` reports it; a middleware (docs/middleware.md) may return one
instead of running the rest of the stage list.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_UNITS = (("h", 3_600_000), ("m", 60_000), ("s", 1_000))


def delay_label(ms: int) -> str:
    """The delay written exactly in the largest unit that divides it: 1s, 90s, 2m, 1500ms."""
    for unit, size in _UNITS:
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


LADDER = "ladder"
"""The ``delay`` label of a retry that waits in the delay ladder (``RetryLater``)."""


class Ack:
    """The handler succeeded (or its key was handled before): acknowledge the delivery."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ACK"


ACK = Ack()


class Requeue:
    """Give the delivery back to its queue without using an attempt (basic.nack with
    requeue): a breaker that is open, a middleware that says "not now"."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUEUE"


REQUEUE = Requeue()


@dataclass(frozen=True, slots=True)
class Retry:
    """Send a copy to the retry queue of ``delay_ms`` as attempt ``next_attempt``; with
    ``ladder``, into the delay ladder for ``delay_ms`` instead (docs/delays.md)."""

    delay_ms: int
    next_attempt: int
    deferred: bool = False  # asked for by RetryLater rather than a failed attempt
    ladder: bool = False  # waits in the delay ladder, not in a retry tier

    @property
    def label(self) -> str:
        """The tier label, as in the retry queue's name (``10s``); ``ladder`` for a wait
        in the delay ladder (a bounded label for metrics)."""
        return LADDER if self.ladder else delay_label(self.delay_ms)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Send a copy to the DLQ with this reason."""

    reason: str


Decision = Ack | Retry | DeadLetter | Requeue


@dataclass(frozen=True, slots=True)
class Outcome:
    """The decision for one delivery and what the copies and metrics need to know."""

    decision: Decision
    type_name: str
    attempt: int
    duration: float = 0.0
    error: str | None = None
    traceback: str | None = None  # formatted for dead letters only
    # The exception of a failed attempt, formatted only where it is logged (the worker's
    # log: rabbitq._worker.copies); not part of an outcome's identity.
    failure: BaseException | None = field(default=None, compare=False, repr=False)
    duplicate: bool = False  # its key was handled before: acked, the handler not run
    busy: bool = False  # its key is in progress elsewhere: a retry copy, no attempt used
    # Acked without running, and why: the status state to record ("cancelled",
    # "superseded"); None for every other outcome.
    skipped: str | None = None

    @property
    def kind(self) -> str:
        """``"ack"``, ``"retry"``, ``"dead-letter"`` or ``"requeue"``."""
        decision = self.decision
        if decision is ACK:
            return "ack"
        if isinstance(decision, Retry):
            return "retry"
        if isinstance(decision, DeadLetter):
            return "dead-letter"
        return "requeue"
