"""What a scheduler logs when its session ends (issue #33, item 10): only a leader says
it stopped leading; a candidate that never led, whose node paused or whose connection
went away, says it cannot contend in one WARNING line, without a traceback."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import aiormq
import pytest

from rabbitq import App
from rabbitq.schedule import runner
from rabbitq.schedule.runner import Scheduler, loss_report


def test_a_candidate_never_says_it_stopped_leading() -> None:
    for exc in (
        aiormq.exceptions.ChannelInvalidStateError("No active transport in channel"),
        aiormq.exceptions.ConnectionChannelError("closed"),
        RuntimeError("something else"),
    ):
        level, line, trace = loss_report("orders", exc, leading=False)
        assert level == logging.WARNING and not trace
        assert "stopped leading" not in line and line.startswith("scheduler of orders cannot")


def test_a_leader_that_lost_its_connection_says_so_in_one_line() -> None:
    exc = aiormq.exceptions.ChannelInvalidStateError("No active transport in channel")
    level, line, trace = loss_report("orders", exc, leading=True)
    assert (level, trace) == (logging.WARNING, False)
    assert line.startswith("stopped leading the schedules of orders (ChannelInvalidStateError")


def test_a_leaders_unexpected_error_keeps_its_traceback() -> None:
    level, line, trace = loss_report("orders", KeyError("bug"), leading=True)
    assert (level, trace) == (logging.ERROR, True) and "stopped leading" in line


class _Connection:
    async def close(self) -> None:
        return None


async def test_a_candidate_whose_connection_goes_away_logs_one_warning_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(queue="sched-log", url="amqp://guest:guest@127.0.0.1:1/")

    @app.schedule(every=timedelta(hours=1))
    def tick(at: Any) -> None:
        return None

    async def connect(*args: Any, **kwargs: Any) -> _Connection:
        return _Connection()

    sessions = 0

    async def session(self: Scheduler, connection: Any) -> None:
        nonlocal sessions
        sessions += 1
        raise aiormq.exceptions.ChannelInvalidStateError("No active transport in channel")

    monkeypatch.setattr(runner, "connect_once", connect)
    monkeypatch.setattr(Scheduler, "_session", session)
    scheduler = Scheduler(app, retry_interval=0.01)
    caplog.set_level(logging.DEBUG, logger="rabbitq.schedule")
    task = asyncio.create_task(scheduler.run())
    while sessions < 3:
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    records = [r for r in caplog.records if r.name == "rabbitq.schedule"]
    assert len(records) == 1  # said once until the reason changes
    assert records[0].levelno == logging.WARNING and records[0].exc_info is None
    assert "stopped leading" not in records[0].getMessage()
