"""Five-field cron expressions and their next fire time in a time zone (pure).

``minute hour day-of-month month day-of-week``, as crontab(5) has them: ``*``, numbers,
ranges ``a-b``, steps ``*/n`` and ``a-b/n``, lists ``a,b``, month names ``JAN``-``DEC``
and day names ``SUN``-``SAT`` (``0`` and ``7`` are both Sunday). When both the day of
the month and the day of the week are restricted, a day matching either fires (as
Vixie cron does).

Cron times are wall-clock times in the schedule's zone, so daylight saving changes
meet them twice a year, and :func:`next_after` decides:

- a wall-clock time that occurs twice (autumn, the clocks go back) fires once, at its
  first occurrence: no tick is doubled;
- a wall-clock time that does not exist (spring, the clocks go forward) does not fire:
  it is the only tick ever skipped.

The parser is ours rather than a dependency's so that exactly these rules hold and are
tested (tests/schedule/test_cron.py); it is ~150 lines.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from ..errors import ConfigurationError

MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# A day that can never come (Feb 30) is refused when parsing; any real one comes within
# 28 years (the Gregorian weekday cycle), which bounds the search.
MAX_DAYS = 366 * 28


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed cron expression: the sets of values each field allows."""

    expression: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Monday, as date.weekday()
    any_day: bool  # day-of-month is "*"
    any_weekday: bool  # day-of-week is "*"

    def matches_day(self, day: date) -> bool:
        """Whether cron fires on ``day`` (at the matching hours and minutes)."""
        if day.month not in self.months:
            return False
        by_day = day.day in self.days
        by_weekday = day.weekday() in self.weekdays
        if self.any_day or self.any_weekday:
            return by_day and by_weekday
        return by_day or by_weekday


def _value(text: str, low: int, high: int, names: tuple[str, ...], offset: int) -> int:
    upper = text.upper()
    if upper in names:
        return names.index(upper) + offset
    if not text.isdigit():
        also = f" or one of {names[0]}-{names[-1]}" if names else ""
        raise ValueError(f"{text!r} is not a number{also}")
    number = int(text)
    if not low <= number <= high:
        raise ValueError(f"{number} is outside {low}-{high}")
    return number


def _field(
    text: str, low: int, high: int, names: tuple[str, ...] = (), offset: int = 0
) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        span, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) < 1:
                raise ValueError(f"step {step_text!r} must be a positive number")
            step = int(step_text)
        if span == "*":
            first, last = low, high
        elif "-" in span:
            a, _, b = span.partition("-")
            first = _value(a, low, high, names, offset)
            last = _value(b, low, high, names, offset)
            if first > last:
                raise ValueError(f"range {span!r} runs backwards")
        else:
            first = _value(span, low, high, names, offset)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    return values


def parse(expression: str) -> Cron:
    """Parse ``expression`` or raise a one-line :class:`~rabbitq.errors.ConfigurationError`."""
    fields = expression.split()
    if len(fields) != 5:
        raise ConfigurationError(
            f"cron {expression!r}: expected 5 fields (minute hour day month weekday), "
            f"got {len(fields)}"
        )
    names = ("minute", "hour", "day of month", "month", "day of week")
    try:
        parts: list[set[int]] = []
        for name, text, (low, high, labels, offset) in zip(
            names,
            fields,
            [(0, 59, (), 0), (0, 23, (), 0), (1, 31, (), 0), (1, 12, MONTHS, 1), (0, 7, DAYS, 0)],
            strict=True,
        ):
            try:
                parts.append(_field(text, low, high, labels, offset))
            except ValueError as exc:
                raise ValueError(f"{name} field {text!r}: {exc}") from None
    except ValueError as exc:
        raise ConfigurationError(f"cron {expression!r}: {exc}") from None
    minutes, hours, days, months, cron_weekdays = parts
    # cron counts Sunday as 0 (and 7); date.weekday() counts Monday as 0
    weekdays = frozenset((d - 1) % 7 for d in cron_weekdays)
    cron = Cron(
        expression=expression,
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=frozenset(days),
        months=frozenset(months),
        weekdays=weekdays,
        any_day=fields[2] == "*",
        any_weekday=fields[4] == "*",
    )
    if not any(cron.matches_day(date(2000, 1, 1) + timedelta(days=n)) for n in range(MAX_DAYS)):
        raise ConfigurationError(f"cron {expression!r}: names a day that never comes")
    return cron


def _exists(wall: datetime) -> bool:
    """Whether a wall-clock time (fold 0, aware) exists in its zone (not in a spring gap)."""
    back = wall.astimezone(UTC).astimezone(wall.tzinfo)
    return back.replace(tzinfo=None) == wall.replace(tzinfo=None)


def next_after(cron: Cron, after: datetime, tz: ZoneInfo) -> datetime:
    """The first fire time strictly after ``after`` (aware), as an aware time in ``tz``.

    Wall-clock candidates are tried in order and taken at their first occurrence
    (``fold=0``): a candidate at or before ``after`` is passed over, which is what keeps
    the repeated autumn hour from firing twice. A candidate that does not exist is
    skipped.
    """
    if after.tzinfo is None:
        raise ConfigurationError(f"next_after needs an aware datetime, not {after!r}")
    start = after.astimezone(tz)
    # compared in UTC: two times in one zone compare as wall-clock times, ignoring fold
    after_utc = after.astimezone(UTC)
    day = start.date()
    for _ in range(MAX_DAYS + 2):
        if cron.matches_day(day):
            first_day = day == start.date()
            for hour in cron.hours:
                if first_day and hour < start.hour:
                    continue
                at = 0
                if first_day and hour == start.hour:
                    at = bisect.bisect_left(cron.minutes, start.minute)
                for minute in cron.minutes[at:]:
                    wall = datetime.combine(day, time(hour, minute), tzinfo=tz)
                    if wall.astimezone(UTC) > after_utc and _exists(wall):
                        return wall
        day += timedelta(days=1)
    raise AssertionError(f"cron {cron.expression!r} found no day")  # parse() refuses these
