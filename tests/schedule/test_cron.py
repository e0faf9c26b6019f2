"""Cron parsing and next fire times, daylight saving included (Europe/Berlin: the
clocks go forward at 02:00 on 29 March 2026 and back at 03:00 on 25 October 2026)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from rabbitq.errors import ConfigurationError
from rabbitq.schedule.cron import next_after, parse

BERLIN = ZoneInfo("Europe/Berlin")


def fires(
    expression: str, start: datetime, until: datetime, tz: ZoneInfo = BERLIN
) -> list[datetime]:
    cron, out, t = parse(expression), [], start
    while True:
        t = next_after(cron, t, tz)
        if t > until:
            return out
        out.append(t)


def test_a_weekday_morning_fires_monday_to_friday_at_nine_berlin_time():
    start = datetime(2026, 11, 20, 12, tzinfo=BERLIN)  # a Friday
    got = fires("0 9 * * MON-FRI", start, start + timedelta(days=7))
    assert [t.strftime("%a %H:%M") for t in got] == [
        f"{d} 09:00" for d in ("Mon", "Tue", "Wed", "Thu", "Fri")
    ]
    assert got[0].utcoffset() == timedelta(hours=1)


def test_fields_take_lists_ranges_steps_and_names():
    cron = parse("*/15 8-10,17 1 jan,JUL 0")
    assert cron.minutes == (0, 15, 30, 45)
    assert cron.hours == (8, 9, 10, 17)
    assert cron.months == {1, 7}
    assert cron.weekdays == {6}  # Sunday, as date.weekday()
    assert parse("0 0 * * 7").weekdays == {6}
    assert parse("5-20/5 * * * *").minutes == (5, 10, 15, 20)
    assert parse("10/20 * * * *").minutes == (10, 30, 50)


def test_day_of_month_or_day_of_week_when_both_are_restricted():
    start = datetime(2026, 11, 1, tzinfo=UTC)
    got = fires("0 0 13 * FRI", start, datetime(2026, 11, 30, tzinfo=UTC), UTC)
    assert [t.day for t in got] == [6, 13, 20, 27]  # Fridays, and the 13th (a Friday too)
    got = fires("0 0 2 * FRI", start, datetime(2026, 11, 30, tzinfo=UTC), UTC)
    assert [t.day for t in got] == [2, 6, 13, 20, 27]


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("0 9 * *", "expected 5 fields"),
        ("60 * * * *", "minute field '60': 60 is outside 0-59"),
        ("* 24 * * *", "hour field"),
        ("* * * * MON-XYZ", "day of week field"),
        ("* * * FOO *", "month field"),
        ("*/0 * * * *", "step '0'"),
        ("5-1 * * * *", "runs backwards"),
        ("0 0 30 2 *", "never comes"),
        ("0 0 31 4,6,9,11 *", "never comes"),
    ],
)
def test_a_bad_expression_is_one_line_that_says_why(expression, says):
    with pytest.raises(ConfigurationError) as caught:
        parse(expression)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_feb_29_comes_in_a_leap_year():
    got = next_after(parse("0 12 29 2 *"), datetime(2026, 3, 1, tzinfo=UTC), UTC)
    assert got == datetime(2028, 2, 29, 12, tzinfo=UTC)


def test_spring_forward_skips_only_the_time_that_does_not_exist():
    # 02:00-02:59 does not exist in Berlin on 29 March 2026
    start = datetime(2026, 3, 28, 12, tzinfo=BERLIN)
    assert [t.day for t in fires("30 2 * * *", start, start + timedelta(days=3))] == [30, 31]
    hourly = fires(
        "0 * * * *",
        datetime(2026, 3, 29, 0, 30, tzinfo=BERLIN),
        datetime(2026, 3, 29, 4, 30, tzinfo=BERLIN),
    )
    assert [t.strftime("%H:%M%z") for t in hourly] == ["01:00+0100", "03:00+0200", "04:00+0200"]
    # a daily time outside the gap is never skipped; it is one day (23 h) later
    daily = fires("0 9 * * *", start, start + timedelta(days=2))
    assert [t.strftime("%d %H:%M%z") for t in daily] == ["29 09:00+0200", "30 09:00+0200"]
    saturday = datetime(2026, 3, 28, 9, tzinfo=BERLIN)
    assert daily[0].astimezone(UTC) - saturday.astimezone(UTC) == timedelta(hours=23)


def test_fall_back_fires_a_repeated_time_once():
    # 02:00-02:59 happens twice in Berlin on 25 October 2026 (CEST, then CET)
    start = datetime(2026, 10, 24, 12, tzinfo=BERLIN)
    got = fires("30 2 * * *", start, start + timedelta(days=3))
    assert [t.strftime("%d %H:%M%z") for t in got] == [
        "25 02:30+0200",
        "26 02:30+0100",
        "27 02:30+0100",
    ]
    every_15 = fires(
        "*/15 * * * *",
        datetime(2026, 10, 25, 1, 50, tzinfo=BERLIN),
        datetime(2026, 10, 25, 3, 20, tzinfo=BERLIN),
    )
    utc = [t.astimezone(UTC) for t in every_15]
    assert len(utc) == len(set(utc)) and utc == sorted(utc)
    assert [t.strftime("%H:%M%z") for t in every_15] == [
        "02:00+0200",
        "02:15+0200",
        "02:30+0200",
        "02:45+0200",  # first pass only
        "03:00+0100",
        "03:15+0100",
    ]


def test_starting_inside_the_repeated_hour_does_not_go_back():
    second_pass = datetime(2026, 10, 25, 2, 10, tzinfo=BERLIN, fold=1)  # 02:10 CET
    got = next_after(parse("*/15 * * * *"), second_pass, BERLIN)
    assert got.astimezone(UTC) > second_pass.astimezone(UTC)
    assert got.strftime("%H:%M%z") == "03:00+0100"


def test_next_after_is_strictly_after():
    at_nine = datetime(2026, 11, 23, 9, tzinfo=BERLIN)
    assert next_after(parse("0 9 * * *"), at_nine, BERLIN) == at_nine + timedelta(days=1)
