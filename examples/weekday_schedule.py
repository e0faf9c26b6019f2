"""A weekday schedule: a sales report at 09:00 Berlin time, Monday to Friday.

Run a worker from the repository root; it consumes the ``reports`` queue and also runs
the schedule (one worker among any number publishes each tick, once)::

    rabbitq worker examples.weekday_schedule:app

and see when it fires next, and when it last did::

    rabbitq schedule list examples.weekday_schedule:app

Each morning's tick publishes one :class:`DailyReport` whose ``message_id`` is derived
from the schedule's name and the tick (``tick:sales_report:20261125T080000Z``); the
handler passes it on as the idempotency key, so a report is built once even if a tick
were ever published twice. At 09:00 Berlin time means 08:00 UTC in winter and 07:00
UTC in summer: the schedule follows the wall clock across daylight saving changes.
``catch_up="last"``: if no worker ran at 09:00 (a long outage, a deploy that took the
morning), the first one to start publishes that morning's report late, not the week's.
"""

from __future__ import annotations

import logging
import os
from datetime import date, datetime
from typing import Protocol

from rabbitq import App, Context, Message

log = logging.getLogger("examples.weekday_schedule")


class DailyReport(Message, type="report.daily"):
    """Build and send the sales report of ``day`` (the tick's date in Berlin)."""

    day: date


class ReportBuilder(Protocol):
    """Builds a day's report; ``idempotency_key`` is the same for the same tick."""

    async def build(self, day: date, *, idempotency_key: str) -> None: ...


class SandboxBuilder:
    """Builds nothing; remembers which days it was asked for, once per key."""

    def __init__(self) -> None:
        self.built: dict[str, date] = {}

    async def build(self, day: date, *, idempotency_key: str) -> None:
        self.built.setdefault(idempotency_key, day)


def create_app(
    *,
    builder: ReportBuilder | None = None,
    queue: str = "example-reports",
    exchange: str = os.environ.get("EXAMPLES_EXCHANGE", "examples"),
    **kwargs: object,
) -> App:
    """The service: the ``report.daily`` handler and the weekday schedule. Its queue and
    exchange are the examples' own (see examples/README.md)."""
    app = App(queue=queue, exchange=exchange, **kwargs)  # type: ignore[arg-type]
    reports = builder or SandboxBuilder()

    @app.schedule(cron="0 9 * * MON-FRI", tz="Europe/Berlin", catch_up="last")
    def sales_report(tick: datetime) -> DailyReport:
        return DailyReport(day=tick.date())

    @app.handler(DailyReport, timeout=120)
    async def build_report(msg: DailyReport, ctx: Context) -> None:
        await reports.build(msg.day, idempotency_key=ctx.message_id)
        log.info("sales report for %s built (%s)", msg.day, ctx.message_id)

    return app


app = create_app()
