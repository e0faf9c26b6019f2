"""The worker's log for superseded debounced messages: one DEBUG line each, and one INFO
line summing them up (a burst of 200 was 199 INFO lines)."""

from __future__ import annotations

import asyncio
import logging

from rabbitq._worker import outcome_log
from rabbitq.outcome import ACK, Outcome


class Delivery:
    def __init__(self, n: int) -> None:
        self.message_id = f"m{n}"


async def test_a_burst_of_superseded_messages_is_one_info_line(caplog):
    summary = outcome_log.Summary(every=0.2)
    outcome_log.superseded, before = summary, outcome_log.superseded
    try:
        with caplog.at_level(logging.DEBUG, logger="rabbitq.worker"):
            outcome = Outcome(ACK, "digest", 1, skipped="superseded")
            for n in range(199):
                outcome_log.skipped(Delivery(n), outcome, "superseded")  # type: ignore[arg-type]
            outcome_log.skipped(Delivery(999), outcome, "cancelled")  # type: ignore[arg-type]
            await asyncio.sleep(0.5)
    finally:
        outcome_log.superseded = before
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 199
    assert info == [
        "message m999 (digest) was cancelled: acked, not run",
        "199 debounced message(s) superseded by a later publish of their key in 0.2s "
        "(199 digest): acked, not run (each at DEBUG)",
    ]


def test_without_an_event_loop_the_summary_is_said_at_once(caplog):
    summary = outcome_log.Summary(every=10)
    with caplog.at_level(logging.INFO, logger="rabbitq.worker"):
        summary.add("digest")
    assert len(caplog.records) == 1 and "1 debounced message(s)" in caplog.records[0].getMessage()
