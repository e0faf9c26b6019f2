"""Retry policy and the pure decision: after a failed attempt, which tier or the DLQ.

Attempts are counted in rabbitq's own ``rabbitq-attempt`` header (1-based, absent
means 1), not in the broker's ``x-death``: a message gets ``1 + len(delays)``
attempts, the n-th failure going to the n-th delay's retry queue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .errors import ConfigurationError, PermanentError, RetryLater
from .ladder.plan import MAX_DELAY_MS, UNIT_MS
from .outcome import DeadLetter, Retry


def delay_ms(seconds: float) -> int:
    """A delay in seconds as whole milliseconds (at least 1 ms)."""
    try:
        ms = 0 if isinstance(seconds, bool) else round(seconds * 1000)
    except (TypeError, ValueError, OverflowError):  # a string, None, NaN, infinity
        ms = 0
    if ms < 1 or abs(ms - seconds * 1000) > 1e-6:
        raise ConfigurationError(
            f"retry delay {seconds!r} s must be a positive whole number of milliseconds"
        )
    return ms


# Dead-letter reasons, as written to the ``rabbitq-reason`` header.
EXHAUSTED = "exhausted"
PERMANENT = "permanent"
INVALID = "invalid"
UNKNOWN_TYPE = "unknown-type"
REASONS = (EXHAUSTED, PERMANENT, INVALID, UNKNOWN_TYPE)
BLOCKED = "blocked"  # behind a dead letter of its ordered key (on_dead="block")
UNDECRYPTABLE = "undecryptable"  # an encrypted app's key unknown or tag failed
DLQ_REASONS = (*REASONS, BLOCKED, UNDECRYPTABLE)
"""Every reason rabbitq writes (``blocked`` only for ordered handlers: docs/ordering.md;
``undecryptable`` only for encrypted apps: docs/privacy.md)."""

# Far above any sane number of attempts; a larger header value is treated as this.
_MAX_ATTEMPT = 1_000_000


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Delays (in seconds) between attempts: ``attempts = 1 + len(delays)``.

    ``RetryPolicy(delays=())`` means a single attempt: a failure is dead-lettered.
    """

    delays: tuple[float, ...] = (1, 10, 60, 600)

    def __post_init__(self) -> None:
        if isinstance(self.delays, (str, bytes)) or not isinstance(self.delays, tuple | list):
            raise ConfigurationError(f"delays must be a tuple of seconds, not {self.delays!r}")
        object.__setattr__(self, "delays", tuple(self.delays))
        for seconds in self.delays:
            delay_ms(seconds)  # raises ConfigurationError for a bad value

    @property
    def attempts(self) -> int:
        """How many times a message is tried before it is dead-lettered."""
        return 1 + len(self.delays)

    @property
    def delays_ms(self) -> tuple[int, ...]:
        """The delays in whole milliseconds, in order."""
        return tuple(delay_ms(s) for s in self.delays)


def parse_attempt(value: Any) -> int:
    """The attempt number from a ``rabbitq-attempt`` header of any type (default 1).

    Other producers and hostile input can put anything there; whatever cannot be read
    as a positive integer counts as the first attempt, and a huge one is capped.
    """
    if isinstance(value, bool):
        return 1
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("ascii", "replace")
    if isinstance(value, str):
        value = value.strip()
        # isdigit() alone accepts "²", which int() refuses.
        if not (value.isascii() and value.isdigit()):
            return 1
        if len(value) > 9:
            return _MAX_ATTEMPT
        value = int(value)
    if isinstance(value, int):
        return min(max(value, 1), _MAX_ATTEMPT)
    return 1


def after_failure(policy: RetryPolicy, attempt: int, *, permanent: bool) -> Retry | DeadLetter:
    """What to do with a message whose ``attempt``-th try failed."""
    if permanent:
        return DeadLetter(PERMANENT)
    delays = policy.delays_ms
    if attempt <= len(delays):
        return Retry(delays[attempt - 1], attempt + 1)
    return DeadLetter(EXHAUSTED)


def not_started(policy: RetryPolicy, attempt: int) -> Retry | None:
    """What to do with a message whose handler never started (no thread was free): the
    first retry tier, *as the same attempt* (it is not charged one); None if the policy
    has no tiers (the worker then returns the message to its queue)."""
    delays = policy.delays_ms
    return Retry(delays[0], attempt) if delays else None


def after_retry_later(policy: RetryPolicy, attempt: int, later: RetryLater) -> Retry | DeadLetter:
    """Where a message goes whose handler raised :class:`~rabbitq.RetryLater`.

    Into the delay ladder for ``later.seconds`` (rounded up to the ladder's 125 ms; at
    least that, at most its 48 days), back to this queue only; the attempt is not used
    up unless ``later.count_attempt`` (then, with none left: ``exhausted``).
    """
    if later.count_attempt and attempt > len(policy.delays_ms):
        return DeadLetter(EXHAUSTED)
    wanted = min(max(math.ceil(later.seconds * 1000), UNIT_MS), MAX_DELAY_MS)
    return Retry(
        wanted, attempt + 1 if later.count_attempt else attempt, deferred=True, ladder=True
    )


def after_exception(
    policy: RetryPolicy, attempt: int, failure: BaseException
) -> Retry | DeadLetter:
    """The decision after a handler raised ``failure`` on its ``attempt``-th try."""
    if isinstance(failure, RetryLater):
        return after_retry_later(policy, attempt, failure)
    return after_failure(policy, attempt, permanent=isinstance(failure, PermanentError))
