"""Rates (``"14/s"``) and the pure GCRA decision that spaces calls out to keep them.

GCRA (the generic cell rate algorithm) keeps one number per limited key, the
*theoretical arrival time* (TAT): the moment at which the key would be back to an
empty budget. A call at ``now`` may start at ``max(tat, now) - tolerance``; taking the
slot moves the TAT one emission interval (``period / count``) later. With ``burst=1``
(the default) the starts are spaced exactly one interval apart, so no window of one
period ever holds more than ``count`` of them; a larger burst lets up to ``burst`` go at
once after a quiet spell.

A call is let through only when it actually starts, never promised a slot in the
future: a waiter that wakes up late (a busy event loop) then pushes the next start
later instead of bunching with it, so the handler *starts* keep the rate, not just
the decisions. A denied caller is told how long to wait before it asks again; the
gate lets one waiter per key and process ask at a time, in arrival order. The same
arithmetic runs in Redis (:mod:`rabbitq.ratelimit.shared`), in microseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigurationError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")


@dataclass(frozen=True, kw_only=True, slots=True)
class Rate:
    """At most ``count`` starts per ``period`` seconds, ``burst`` of them at once."""

    count: int
    period: float
    burst: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ConfigurationError(f"a rate needs a positive count, not {self.count!r}")
        if not self.period > 0:
            raise ConfigurationError(f"a rate needs a positive period, not {self.period!r}")
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise ConfigurationError(f"burst must be a positive integer, not {self.burst!r}")
        if self.burst > self.count:
            raise ConfigurationError(
                f"burst ({self.burst}) cannot exceed the count per period ({self.count})"
            )

    @property
    def interval(self) -> float:
        """Seconds between two starts at the steady rate (the emission interval)."""
        return self.period / self.count

    @property
    def tolerance(self) -> float:
        """How far ahead of the steady rate a start may be: ``(burst - 1) * interval``."""
        return (self.burst - 1) * self.interval

    def __str__(self) -> str:
        for unit, seconds in _UNITS.items():
            if self.period == seconds:
                return f"{self.count}/{unit}"
        return f"{self.count}/{self.period:g}s"


def parse_rate(text: str | Rate, *, burst: int = 1) -> Rate:
    """``"14/s"``, ``"100/m"``, ``"5000/h"``, ``"3/10s"``, ``"20/500ms"`` as a :class:`Rate`."""
    if isinstance(text, Rate):
        return text
    if not isinstance(text, str):
        raise ConfigurationError(f"a rate is a string such as '14/s', not {text!r}")
    match = _RATE.match(text)
    if match is None:
        raise ConfigurationError(
            f"cannot read rate {text!r}: write COUNT/UNIT such as '14/s', '100/m', '3/10s'"
        )
    count, multiple, unit = match.groups()
    period = (float(multiple) if multiple else 1.0) * _UNITS[unit]
    return Rate(count=int(count), period=period, burst=burst)


@dataclass(frozen=True, slots=True)
class Decision:
    """Start now (``wait == 0``; ``tat`` is the key's new arrival time) or ask again
    after ``wait`` seconds (``tat`` unchanged)."""

    wait: float
    tat: float

    @property
    def allowed(self) -> bool:
        """Whether the call may start now."""
        return self.wait == 0.0


def check(tat: float | None, now: float, rate: Rate) -> Decision:
    """May a call of a key whose arrival time is ``tat`` (None: never used) start at ``now``?"""
    base = now if tat is None or tat < now else tat
    early = base - rate.tolerance - now
    if early > 0:
        return Decision(wait=early, tat=base)
    return Decision(wait=0.0, tat=base + rate.interval)
