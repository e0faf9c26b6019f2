"""The app of the schedule chaos test (tests/chaos/test_schedule_ticks.py): a schedule
firing every second, run by ``rabbitq worker`` processes that the test kills with
``kill -9``. Its queue and exchange come from the environment, unique per run."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from rabbitq import App, Message


class Tick(Message, type="chaos.schedule.tick"):
    at: str


class Noop(Message, type="chaos.schedule.noop"):
    pass


app = App(
    queue=os.environ.get("SCHEDULE_CHAOS_QUEUE", "schedule-chaos"),
    exchange=os.environ.get("SCHEDULE_CHAOS_EXCHANGE", "schedule-chaos"),
)


@app.handler(Noop)
async def noop(msg: Noop) -> None:
    return None


@app.schedule(every=timedelta(seconds=1), catch_up="all")
def every_second(tick: datetime) -> Tick:
    return Tick(at=tick.isoformat())
