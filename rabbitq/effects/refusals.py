"""What the outbox relay says about rows the broker refuses: once, then a summary.

A row whose routing key no queue is bound to is refused (publishing is mandatory) and
stays in the outbox; the relay tries it again on every poll. Logging each attempt
would be several warnings a second for as long as nothing is bound. Instead, the first
refusal of an ``(exchange, routing key, error)`` is said at once, with what to do; later
ones are counted and summed up at most once per :data:`SUMMARY_EVERY` seconds; and when
rows of that key are published again, that is said once too. The decisions are pure
(the clock is passed in); the relay calls :meth:`RefusalLog.refused` and
:meth:`RefusalLog.published`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import Unroutable

SUMMARY_EVERY = 60.0


@dataclass(kw_only=True)
class _Refusal:
    first_said: float
    last_said: float
    since_said: int = 0  # refusals not yet said
    total: int = 1


class RefusalLog:
    """Says each kind of refusal once, then at most one summary per ``every`` seconds."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        every: float = SUMMARY_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.every = every
        self.clock = clock
        self._open: dict[tuple[str, str, str], _Refusal] = {}

    def refused(self, exchange: str, routing_key: str, row_id: int, exc: BaseException) -> None:
        """Row ``row_id`` was refused with ``exc``: say so now, or count it for later."""
        key = (exchange, routing_key, type(exc).__name__)
        now = self.clock()
        seen = self._open.get(key)
        if seen is None:
            self._open[key] = _Refusal(first_said=now, last_said=now)
            self.logger.warning(
                "outbox row %d not published: %s; %s", row_id, exc, advice(exc, routing_key)
            )
            return
        seen.since_said += 1
        seen.total += 1
        if now - seen.last_said >= self.every:
            self.logger.warning(
                "outbox: %d more attempt(s) refused in the last %.0f s for routing key %r "
                "on exchange %r (%s); the rows wait in the outbox",
                seen.since_said,
                now - seen.last_said,
                routing_key,
                exchange,
                type(exc).__name__,
            )
            seen.since_said = 0
            seen.last_said = now

    def published(self, exchange: str, routing_key: str) -> None:
        """A row of this routing key was published: the refusals of it are over."""
        over = [k for k in self._open if k[0] == exchange and k[1] == routing_key]
        for key in over:
            seen = self._open.pop(key)
            self.logger.info(
                "outbox: rows for routing key %r on exchange %r are published again "
                "(%d attempt(s) were refused over %.0f s)",
                routing_key,
                exchange,
                seen.total,
                self.clock() - seen.first_said,
            )


def advice(exc: BaseException, routing_key: str) -> str:
    """What to do about a refusal, in a few words (pure)."""
    if isinstance(exc, Unroutable):
        return (
            f"the row waits in the outbox until a queue is bound to {routing_key!r}: start "
            f"a worker of the service that consumes it, or declare its queue with "
            f"'rabbitq topology MODULE:APP' (said again once a minute while it lasts)"
        )
    return "it is tried again on every poll (said again once a minute while it lasts)"
