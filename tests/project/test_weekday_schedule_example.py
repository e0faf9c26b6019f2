"""The weekday schedule example (examples/weekday_schedule.py), tested without a broker:
when it fires, what a tick publishes, and the handler through rabbitq.testing."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from examples import weekday_schedule
from examples.weekday_schedule import DailyReport, SandboxBuilder
from rabbitq.schedule import tick_id
from rabbitq.testing import deliver

BERLIN = ZoneInfo("Europe/Berlin")


def test_it_fires_at_nine_berlin_time_on_weekdays_only():
    s = weekday_schedule.app.schedules["sales_report"]
    assert s.when == "cron 0 9 * * MON-FRI Europe/Berlin" and s.catch_up == "last"
    friday_noon = datetime(2026, 11, 27, 12, tzinfo=BERLIN)
    monday = s.next_after(friday_noon)
    assert monday == datetime(2026, 11, 30, 9, tzinfo=BERLIN)
    assert monday.astimezone(UTC).hour == 8  # winter: UTC+1


def test_it_stays_at_nine_across_the_spring_change():
    s = weekday_schedule.app.schedules["sales_report"]
    friday = datetime(2026, 3, 27, 9, tzinfo=BERLIN)  # clocks go forward on Sunday the 29th
    monday = s.next_after(friday)
    assert (monday.day, monday.hour, monday.astimezone(UTC).hour) == (30, 9, 7)


def test_a_tick_publishes_that_days_report_under_a_derived_id():
    s = weekday_schedule.app.schedules["sales_report"]
    tick = datetime(2026, 11, 25, 9, tzinfo=BERLIN)
    assert s.fn(tick) == DailyReport(day=date(2026, 11, 25))
    assert tick_id("sales_report", tick) == "tick:sales_report:20261125T080000Z"


async def test_the_report_is_built_once_per_tick():
    builder = SandboxBuilder()
    app = weekday_schedule.create_app(builder=builder)
    mid = tick_id("sales_report", datetime(2026, 11, 25, 9, tzinfo=BERLIN))
    for _ in range(2):  # the same tick delivered twice
        result = await deliver(app, DailyReport(day=date(2026, 11, 25)), message_id=mid)
        assert result.acked
    assert builder.built == {mid: date(2026, 11, 25)}


def test_a_week_has_five_reports():
    s = weekday_schedule.app.schedules["sales_report"]
    start = datetime(2026, 11, 22, tzinfo=BERLIN)  # a Sunday
    assert [t.strftime("%a") for t in s.ticks(start, start + timedelta(days=7))] == [
        "Mon", "Tue", "Wed", "Thu", "Fri",
    ]  # fmt: skip
