"""The log lines for a message acked: a DEBUG line for each one handled (retries and
dead letters log their own line, INFO and WARNING, and a person debugging expects one
for every outcome) and an INFO line for each duplicate and each message acked unrun."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..outcome import Outcome
from .delivery import Incoming

log = logging.getLogger("rabbitq.worker")


def duplicate(delivery: Incoming, outcome: Outcome) -> None:
    """The INFO line for a duplicate: acked without running its handler."""
    log.info(
        "message %s (%s) is a duplicate of a handled one: acked, not run",
        delivery.message_id or "-",
        outcome.type_name,
    )


def skipped(delivery: Incoming, outcome: Outcome, why: str) -> None:
    """The INFO line for a message acked without running, ``why`` (``cancelled``)."""
    log.info("message %s (%s) was %s: acked, not run", delivery.message_id or "-",
             outcome.type_name, why)  # fmt: skip


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
