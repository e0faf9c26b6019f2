"""What one delivery came to: :class:`Outcome` (ack, retry at a tier, or dead-letter,
and what the copy, the log and the metrics need to know), and :func:`failed`, the
outcome of an attempt that raised (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from ..amqp import headers as h
from ..retry import DeadLetter, Retry, RetryPolicy, after_exception


class Ack:
    """The handler succeeded: acknowledge the delivery."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ACK"


ACK = Ack()


@dataclass(frozen=True, slots=True)
class Outcome:
    """The decision for one delivery and what the copies and metrics need to know."""

    decision: Ack | Retry | DeadLetter
    type_name: str
    attempt: int
    duration: float = 0.0
    error: str | None = None
    traceback: str | None = None  # formatted for dead letters only
    duplicate: bool = False  # its key was handled before: acked, the handler not run
    busy: bool = False  # its key is in progress elsewhere: a retry copy, no attempt used


def failed(
    policy: RetryPolicy, type_name: str, attempt: int, failure: Exception, duration: float = 0.0
) -> Outcome:
    """The outcome of an ``attempt`` that raised ``failure``: retried or dead-lettered
    as ``policy`` says. Only a dead letter carries the traceback: formatting one costs
    more than the rest of a retry (it reads the source lines of every frame)."""
    decision = after_exception(policy, attempt, failure)
    return Outcome(
        decision,
        type_name,
        attempt,
        duration,
        error=h.format_error(failure),
        traceback=h.format_traceback(failure) if isinstance(decision, DeadLetter) else None,
    )
