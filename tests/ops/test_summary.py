"""The worker's periodic INFO summary (rabbitq._ops.summary): one line per window that
held outcomes, none while idle, and what is left when the worker stops."""

from __future__ import annotations

import asyncio
import logging
import re

from rabbitq._ops.summary import Summary


def summaries(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rabbitq.worker"]


async def test_a_window_with_outcomes_ends_in_one_line_that_counts_them(caplog):
    caplog.set_level(logging.INFO, logger="rabbitq.worker")
    summary = Summary(interval=0.05)
    for _ in range(3):
        summary.succeeded("q", "t", 0.01)
    summary.retried("q", "t", "1s", 0.01)
    summary.dead_lettered("q", "t", "exhausted", 0.01)
    while not summaries(caplog):
        await asyncio.sleep(0.01)
    (line,) = summaries(caplog)
    assert re.fullmatch(r"handled 3, retried 1, dead-lettered 1 in the last \d+s", line)


async def test_an_idle_worker_says_nothing_and_keeps_no_timer(caplog):
    caplog.set_level(logging.INFO, logger="rabbitq.worker")
    summary = Summary(interval=0.01)
    summary.succeeded("q", "t", 0.01)
    while not summaries(caplog):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # several windows, nothing in them
    assert len(summaries(caplog)) == 1
    assert summary._timer is None


async def test_flush_says_the_open_window_at_once_and_only_once(caplog):
    caplog.set_level(logging.INFO, logger="rabbitq.worker")
    summary = Summary()  # 60 s: only flush() can say it within the test
    summary.requeued("q", "t")
    summary.succeeded("q", "t", 0.01)
    summary.flush()
    summary.flush()
    assert summaries(caplog) == ["handled 1, requeued 1 in the last 1s"]


def test_the_line_names_only_what_happened():
    summary = Summary()
    assert summary.line(60) is None
    summary.counts["handled"] = 120
    summary.counts["dead-lettered"] = 1
    assert summary.line(60) == "handled 120, dead-lettered 1 in the last 60s"
