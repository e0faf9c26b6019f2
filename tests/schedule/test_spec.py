"""Registering schedules, their next ticks and their message ids (no broker)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from rabbitq import App, Message
from rabbitq.errors import ConfigurationError
from rabbitq.schedule.spec import tick_id


class Report(Message, type="test.schedule.report"):
    day: str


def app() -> App:
    return App(queue="schedule-spec")


def test_the_decorator_registers_a_cron_schedule_under_the_functions_name():
    a = app()

    @a.schedule(cron="0 9 * * MON-FRI", tz="Europe/Berlin", catch_up="all")
    def morning(tick: datetime) -> Report:
        return Report(day=tick.date().isoformat())

    s = a.schedules["morning"]
    assert (s.name, s.catch_up, s.is_async) == ("morning", "all", False)
    assert s.when == "cron 0 9 * * MON-FRI Europe/Berlin"
    assert morning(datetime(2026, 1, 1, tzinfo=UTC)).day == "2026-01-01"  # returned as is


def test_every_ticks_on_multiples_of_the_period_since_the_epoch():
    a = app()

    @a.schedule(every=timedelta(seconds=30), name="half-minute", catch_up="none")
    async def tick(at: datetime) -> None:
        return None

    s = a.schedules["half-minute"]
    assert s.is_async and s.when == "every 30s"
    after = datetime(2026, 11, 25, 7, 0, 10, 500, tzinfo=UTC)
    assert s.next_after(after) == datetime(2026, 11, 25, 7, 0, 30, tzinfo=UTC)
    assert s.next_after(datetime(2026, 11, 25, 7, 0, 30, tzinfo=UTC)) == datetime(
        2026, 11, 25, 7, 1, tzinfo=UTC
    )
    assert s.count(after, after + timedelta(minutes=2)) == 4


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"cron": "0 9 * * *", "every": timedelta(seconds=5)}, "either cron= or every="),
        ({}, "either cron= or every="),
        ({"cron": "0 9 * *"}, "expected 5 fields"),
        ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"every": timedelta(milliseconds=10)}, "at least 1 second"),
        ({"every": 30}, "every must be a timedelta"),
        ({"every": timedelta(seconds=5), "tz": "Europe/Berlin"}, "tz= goes with cron="),
        ({"every": timedelta(seconds=5), "catch_up": "some"}, "catch_up must be one of"),
        ({"every": timedelta(seconds=5), "name": "a b"}, "schedule name 'a b'"),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs, says):
    with pytest.raises(ConfigurationError) as caught:
        app().schedule(**kwargs)(lambda tick: None)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_lambda_needs_a_name_and_names_are_unique():
    a = app()
    with pytest.raises(ConfigurationError, match="schedule name '<lambda>'"):
        a.schedule(every=timedelta(seconds=5))(lambda tick: None)
    a.schedule(every=timedelta(seconds=5), name="x")(lambda tick: None)
    with pytest.raises(ConfigurationError, match="already a schedule named 'x'"):
        a.schedule(every=timedelta(seconds=9), name="x")(lambda tick: None)


def test_the_function_must_take_the_tick_time():
    def no_tick() -> None:
        return None

    with pytest.raises(ConfigurationError, match="must take one argument, the tick time"):
        app().schedule(every=timedelta(seconds=5))(no_tick)


def test_a_naive_tick_is_refused():
    a = app()
    a.schedule(every=timedelta(seconds=5), name="x")(lambda tick: None)
    with pytest.raises(ConfigurationError, match="timezone-aware"):
        a.schedules["x"].next_after(datetime(2026, 1, 1))
    with pytest.raises(ConfigurationError, match="timezone-aware"):
        tick_id("x", datetime(2026, 1, 1))


def test_a_tick_id_is_a_pure_function_of_name_and_instant():
    berlin = datetime(2026, 11, 25, 9, tzinfo=ZoneInfo("Europe/Berlin"))
    assert tick_id("morning", berlin) == "tick:morning:20261125T080000Z"
    assert tick_id("morning", berlin.astimezone(UTC)) == tick_id("morning", berlin)
    assert tick_id("morning", berlin, 2) == "tick:morning:20261125T080000Z.2"
    fine = datetime(2026, 1, 1, 0, 0, 1, 250000, tzinfo=UTC)
    assert tick_id("fast", fine) == "tick:fast:20260101T000001.250000Z"
