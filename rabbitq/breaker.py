"""The circuit breaker: stop taking a queue's messages while a handler's dependency is down.

Without it, an outage of the email provider burns every message's retries in minutes
and fills the DLQ. With it, once a handler's failure ratio over its recent outcomes
crosses a threshold, the worker cancels its consumer for a cool-down (messages wait
in the queue, no attempt used), then lets a few probe messages through: if they
succeed it consumes again, if one fails it waits another cool-down.

:class:`Breaker` is the configuration, :class:`Circuit` the pure state machine (time is
passed in); :class:`rabbitq._worker.breaker_guard.BreakerGuard` is what the worker calls.
Off by default; see docs/safety.md for why and how to choose.

States: ``closed`` (normal) → ``open`` (no handler runs, the consumer is cancelled) →
``half-open`` (up to ``probes`` handlers run; the rest wait for their verdict) →
``closed`` when they all succeed, or ``open`` again at the first failure.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from .errors import ConfigurationError
from .outcome import DeadLetter, Requeue, Retry
from .retry import EXHAUSTED

State = Literal["closed", "open", "half-open"]
CLOSED: State = "closed"
OPEN: State = "open"
HALF_OPEN: State = "half-open"


@dataclass(frozen=True, kw_only=True)
class Breaker:
    """When to open: at least ``failure_ratio`` of the last ``window`` outcomes (those
    younger than ``window_seconds``) failed, and there were at least ``min_calls``.
    Open for ``cooldown`` seconds, then ``probes`` messages decide.

    A failure is an attempt that raised (other than ``PermanentError``) or timed out;
    a permanent error or an invalid message says nothing about the dependency.
    """

    failure_ratio: float = 0.5
    window: int = 20
    window_seconds: float = 60.0
    min_calls: int = 10
    cooldown: float = 30.0
    probes: int = 3

    def __post_init__(self) -> None:
        if not 0 < self.failure_ratio <= 1:
            raise ConfigurationError(f"failure_ratio must be in (0, 1], not {self.failure_ratio}")
        for name in ("window", "min_calls", "probes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be a positive integer, not {value!r}")
        if self.min_calls > self.window:
            raise ConfigurationError(
                f"min_calls ({self.min_calls}) cannot exceed window ({self.window})"
            )
        for name in ("window_seconds", "cooldown"):
            if not getattr(self, name) > 0:
                raise ConfigurationError(f"{name} must be positive seconds")


@dataclass
class Circuit:
    """One handler's breaker state. Pure: every method takes the time ``now``."""

    config: Breaker
    state: State = CLOSED
    opened_at: float = 0.0
    _outcomes: deque[tuple[float, bool]] = field(default_factory=deque)
    _probes_out: int = 0
    _probe_successes: int = 0

    def tick(self, now: float) -> None:
        """Open → half-open once the cool-down is over."""
        if self.state == OPEN and now - self.opened_at >= self.config.cooldown:
            self._to(HALF_OPEN, now)

    def allow(self, now: float) -> bool | None:
        """May a handler run now? True: yes (in half-open it takes a probe slot).
        False: no, the circuit is open. None: not yet, all probes are out."""
        self.tick(now)
        if self.state == OPEN:
            return False
        if self.state == HALF_OPEN:
            if self._probes_out >= self.config.probes:
                return None
            self._probes_out += 1
        return True

    def record(self, ok: bool | None, now: float, *, probe: bool = False) -> None:
        """The outcome of a handler: True succeeded, False failed, None says nothing.

        ``probe``: the handler was let through in half-open. Outcomes of handlers that
        started before the circuit opened are ignored.
        """
        if self.state == HALF_OPEN and probe:
            if ok is None:
                self._probes_out -= 1
            elif not ok:
                self._to(OPEN, now)
            else:
                self._probe_successes += 1
                if self._probe_successes >= self.config.probes:
                    self._to(CLOSED, now)
            return
        if self.state != CLOSED or ok is None:
            return
        outcomes = self._outcomes
        outcomes.append((now, ok))
        while (
            len(outcomes) > self.config.window or outcomes[0][0] < now - self.config.window_seconds
        ):
            outcomes.popleft()
        failures = sum(1 for _, good in outcomes if not good)
        if len(outcomes) >= self.config.min_calls and failures >= self.config.failure_ratio * len(
            outcomes
        ):
            self._to(OPEN, now)

    def _to(self, state: State, now: float) -> None:
        self.state = state
        self._outcomes.clear()
        self._probes_out = self._probe_successes = 0
        if state == OPEN:
            self.opened_at = now


def verdict(decision: object) -> bool | None:
    """What a dispatch decision says about the handler's dependency."""
    if isinstance(decision, Retry):
        return False
    if isinstance(decision, DeadLetter):
        return False if decision.reason == EXHAUSTED else None
    if isinstance(decision, Requeue):  # not run: says nothing of the dependency
        return None
    return True  # ack


def combined(states: list[State]) -> State:
    """The queue's state: open if any circuit is, else half-open if any is, else closed."""
    for state in (OPEN, HALF_OPEN):
        if state in states:
            return state
    return CLOSED
