"""When a failed outbox row is tried again, and how the relay's failures are logged (pure).

A row that the broker refuses (unroutable: no queue bound to its type; nacked) waits its
own backoff, 1 s doubling to 60 s, in its ``next_attempt_at`` column; while it waits it
holds back only the later rows of its key (``OutboxSql.pending``). A failure of the link
itself (the connection or channel closed, no confirm) is not the row's fault: it gets no
backoff of its own, the relay pauses as a whole and tries again.

Failures are logged as a summary, at most one line every ``every`` seconds (the first at
once), whatever the number of rows: 200 unroutable rows make one line, not 200 a pass.
The rows themselves are listed by ``rabbitq outbox list``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

FIRST_BACKOFF = 1.0
MAX_BACKOFF = 60.0
LOG_EVERY = 30.0


def backoff(attempts: int, first: float = FIRST_BACKOFF, cap: float = MAX_BACKOFF) -> float:
    """Seconds a row that has failed ``attempts`` times waits before its next try:
    ``first``, doubling, at most ``cap``."""
    return min(cap, first * 2.0 ** min(max(0, attempts - 1), 30))


@dataclass(frozen=True, slots=True)
class Failure:
    """One row's failed publish: ``kind`` is unroutable, nacked or interrupted;
    ``retry_in`` its backoff (0 for an interrupted one: the relay pauses instead)."""

    row_id: int
    type: str
    kind: str
    error: str
    retry_in: float


@dataclass(slots=True)
class FailureLog:
    """Failures gathered between log lines; :meth:`line` says what to log, if it is time.

    The first failure after a quiet period is reported at once; later ones are summed and
    reported at most every ``every`` seconds."""

    table: str
    every: float = LOG_EVERY
    clock: Callable[[], float] = time.monotonic
    _kinds: Counter[str] = field(default_factory=Counter)
    _types: Counter[str] = field(default_factory=Counter)
    _rows: set[int] = field(default_factory=set)
    _example: Failure | None = None
    _longest: float = 0.0
    _last: float | None = None

    def add(self, failures: list[Failure]) -> None:
        """Count ``failures`` towards the next line."""
        for f in failures:
            self._kinds[f.kind] += 1
            self._types[f.type] += 1
            self._rows.add(f.row_id)
            self._longest = max(self._longest, f.retry_in)
            if self._example is None:
                self._example = f

    def line(self) -> str | None:
        """The summary to log now, or None (nothing new, or a line was logged recently)."""
        if self._example is None:
            return None
        now = self.clock()
        if self._last is not None and now - self._last < self.every:
            return None
        self._last = now
        text = summary(
            self.table,
            len(self._rows),
            sum(self._kinds.values()),
            self._kinds,
            self._types,
            self._example,
            self._longest,
        )
        self._kinds.clear()
        self._types.clear()
        self._rows.clear()
        self._example = None
        self._longest = 0.0
        return text


def summary(
    table: str,
    rows: int,
    failures: int,
    kinds: Counter[str],
    types: Counter[str],
    example: Failure,
    longest: float,
) -> str:
    """One line about ``failures`` failed publishes of ``rows`` rows."""
    by_kind = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
    shown = [f"{name} x{n}" for name, n in types.most_common(3)]
    if len(types) > 3:
        shown.append(f"{len(types) - 3} more")
    wait = f"; each waits its backoff (up to {longest:g}s)" if longest else ""
    unbound = (
        "; an unroutable row waits until a queue is bound to its type: start a worker of "
        "the service that consumes it, or declare its queue with 'rabbitq topology "
        "MODULE:APP'"
        if kinds.get("unroutable")
        else ""
    )
    return (
        f"outbox {table}: {failures} failed publish(es) of {rows} row(s) ({by_kind}; "
        f"types {', '.join(shown)}), e.g. row {example.row_id}: {example.error}{wait}; "
        f"later rows of their keys wait, the others go on (rabbitq outbox list){unbound}"
    )
