"""The log lines for a message acked: a DEBUG line for each one handled (retries and
dead letters log their own line, INFO and WARNING, and a person debugging expects one
for every outcome) and an INFO line for each duplicate and each message acked unrun,
but for superseded debounced messages: a burst of 200 supersedes 199, as meant, so each
is a DEBUG line and one INFO line sums them up per :data:`SUMMARY_EVERY` seconds."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from ..outcome import Outcome
from .delivery import Incoming

log = logging.getLogger("rabbitq.worker")

SUMMARY_EVERY = 10.0
"""Seconds over which the superseded messages are summed up in one INFO line."""
SUPERSEDED = "superseded"


def duplicate(delivery: Incoming, outcome: Outcome) -> None:
    """The INFO line for a duplicate: acked without running its handler."""
    log.info(
        "message %s (%s) is a duplicate of a handled one: acked, not run",
        delivery.message_id or "-",
        outcome.type_name,
    )


def skipped(delivery: Incoming, outcome: Outcome, why: str) -> None:
    """The INFO line for a message acked without running, ``why`` (``cancelled``); for
    ``superseded``, a DEBUG line and a count in the next summary."""
    if why == SUPERSEDED:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("message %s (%s) was superseded: acked, not run",
                      delivery.message_id or "-", outcome.type_name)  # fmt: skip
        superseded.add(outcome.type_name)
        return
    log.info("message %s (%s) was %s: acked, not run", delivery.message_id or "-",
             outcome.type_name, why)  # fmt: skip


class Summary:
    """Superseded messages counted per type, logged as one INFO line ``every``
    seconds after the first of them (then counting starts again)."""

    def __init__(self, every: float = SUMMARY_EVERY) -> None:
        self.every = every
        self.counts: Counter[str] = Counter()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, type_name: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to wait on: said at once
            self.counts[type_name] += 1
            self.emit()
            return
        if self._timer is not None and self._loop is not loop:  # its loop ended first
            self.emit()
        self.counts[type_name] += 1
        if self._timer is None:
            self._loop = loop
            self._timer = loop.call_later(self.every, self.emit)

    def emit(self) -> None:
        """The INFO line for what was counted since the last one (none: no line)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        counts, self.counts = self.counts, Counter()
        if counts:
            each = ", ".join(f"{n} {t}" for t, n in sorted(counts.items()))
            log.info(
                "%d debounced message(s) superseded by a later publish of their key in "
                "%gs (%s): acked, not run (each at DEBUG)",
                sum(counts.values()), self.every, each,
            )  # fmt: skip


superseded = Summary()


def nothing() -> None:
    """What follows the ack of a message acked unrun: no hook (it was not handled)."""


def handled(done: Callable[[], None], delivery: Incoming, outcome: Outcome) -> Callable[[], None]:
    """``done`` (what follows the ack), preceded by one DEBUG line when debugging; else
    ``done`` itself, so that the hot path pays nothing."""
    if not log.isEnabledFor(logging.DEBUG):
        return done

    def logged() -> None:
        log.debug(
            "message %s (%s) handled at attempt %d in %.3fs",
            delivery.message_id or "-",
            outcome.type_name,
            outcome.attempt,
            outcome.duration,
        )
        done()

    return logged
