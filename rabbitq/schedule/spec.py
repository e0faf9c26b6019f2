"""A periodic schedule: when it fires, what a tick is called, and the registry an
:class:`~rabbitq.App` keeps (pure, no I/O).

``@app.schedule(cron="0 9 * * MON-FRI", tz="Europe/Berlin")`` or
``@app.schedule(every=timedelta(seconds=30))`` registers a function that receives the
tick time (an aware datetime) and returns the message, or messages, to publish.

- ``cron`` ticks are wall-clock times in ``tz`` (default UTC); see
  :mod:`rabbitq.schedule.cron` for daylight saving.
- ``every`` ticks are whole multiples of the period since the Unix epoch, in UTC:
  ``every=timedelta(hours=1)`` fires on the hour, whatever the clocks in any zone do.
- A tick's message id is :func:`tick_id` of the schedule's name and the tick time: a
  pure function, the same in every process, so a tick published twice (two leaders in
  a network partition) carries one id and an idempotent consumer runs it once.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import ConfigurationError
from ..handler import is_async_fn
from . import cron as cronlib

if TYPE_CHECKING:
    from ..settings import TLS

CatchUp = Literal["none", "last", "all"]
CATCH_UPS: tuple[str, ...] = get_args(CatchUp)
DEFAULT_CATCH_UP: CatchUp = "last"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MIN_EVERY = timedelta(seconds=1)
NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """One registered schedule (built by :meth:`rabbitq.App.schedule`)."""

    name: str
    fn: Callable[[datetime], Any]
    is_async: bool
    catch_up: CatchUp
    cron: cronlib.Cron | None = None
    every: timedelta | None = None
    tz: ZoneInfo = ZoneInfo("UTC")

    @property
    def when(self) -> str:
        """How it fires, for people: ``cron 0 9 * * MON-FRI Europe/Berlin`` or ``every 30s``."""
        if self.cron is not None:
            return f"cron {self.cron.expression} {self.tz.key}"
        assert self.every is not None
        return f"every {_seconds(self.every)}s"

    def next_after(self, after: datetime) -> datetime:
        """The first tick strictly after ``after`` (aware)."""
        if after.tzinfo is None:
            raise ConfigurationError(f"a tick time must be timezone-aware, not {after!r}")
        if self.cron is not None:
            return cronlib.next_after(self.cron, after, self.tz)
        assert self.every is not None
        periods = (after - EPOCH) // self.every
        return (EPOCH + (periods + 1) * self.every).astimezone(self.tz)

    def ticks(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Every tick in ``(after, until]``, in order."""
        tick = self.next_after(after)
        while tick <= until:
            yield tick
            tick = self.next_after(tick)

    def count(self, after: datetime, until: datetime) -> int | None:
        """How many ticks fall in ``(after, until]``, when that is arithmetic (``every``)."""
        if self.every is None or until <= after:
            return None if self.every is None else 0
        return (until - EPOCH) // self.every - (after - EPOCH) // self.every


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():g}"


def tick_id(name: str, tick: datetime, index: int = 0) -> str:
    """The ``message_id`` of message ``index`` of ``name``'s tick at ``tick`` (aware).

    ``tick:<name>:<UTC time>`` (``20261125T080000Z``, microseconds only when there are
    some), with ``.<index>`` for the second message of a tick and after.
    """
    if tick.tzinfo is None:
        raise ConfigurationError(f"a tick time must be timezone-aware, not {tick!r}")
    utc = tick.astimezone(UTC)
    stamp = utc.strftime("%Y%m%dT%H%M%S") + (f".{utc.microsecond:06d}" if utc.microsecond else "")
    return f"tick:{name}:{stamp}Z" + (f".{index}" if index else "")


def _zone(tz: str | ZoneInfo | None) -> ZoneInfo:
    if tz is None:
        return ZoneInfo("UTC")
    if isinstance(tz, ZoneInfo):
        return tz
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(
            f"unknown time zone {tz!r} (an IANA name such as 'Europe/Berlin'; "
            f"on Windows install the 'tzdata' package)"
        ) from None


def check(
    *,
    cron: str | None,
    every: timedelta | None,
    tz: str | ZoneInfo | None,
    catch_up: str,
    label: str,
) -> None:
    """Refuse bad arguments with one line each (the decorator calls it at once)."""
    if (cron is None) == (every is None):
        raise ConfigurationError(f"schedule {label!r}: give either cron= or every=, not both")
    if catch_up not in CATCH_UPS:
        raise ConfigurationError(
            f"schedule {label!r}: catch_up must be one of {', '.join(CATCH_UPS)}, not {catch_up!r}"
        )
    if every is not None:
        if tz is not None:
            raise ConfigurationError(
                f"schedule {label!r}: tz= goes with cron= (every= ticks are UTC instants)"
            )
        if not isinstance(every, timedelta) or every < MIN_EVERY:
            raise ConfigurationError(
                f"schedule {label!r}: every must be a timedelta of at least 1 second, not {every!r}"
            )
    if cron is not None:
        cronlib.parse(cron)
    _zone(tz)


def make(
    fn: Callable[[datetime], Any],
    *,
    cron: str | None,
    every: timedelta | None,
    tz: str | ZoneInfo | None,
    catch_up: str,
    name: str | None,
) -> Schedule:
    """Validate the decorator's arguments into a :class:`Schedule` (one-line errors)."""
    label = name or getattr(fn, "__name__", None) or ""
    check(cron=cron, every=every, tz=tz, catch_up=catch_up, label=label)
    if not NAME.fullmatch(label):
        raise ConfigurationError(
            f"schedule name {label!r}: 1-100 letters, digits, '_', '.' or '-' (pass name=)"
        )
    if not callable(fn):
        raise ConfigurationError(f"schedule {label!r}: {fn!r} is not a function")
    try:
        inspect.signature(fn).bind(EPOCH)
    except TypeError:
        raise ConfigurationError(
            f"schedule {label!r}: the function must take one argument, the tick time"
        ) from None
    except ValueError:  # no signature to inspect (some builtins): called as it is
        pass
    return Schedule(
        name=label,
        fn=fn,
        is_async=is_async_fn(fn),
        catch_up=catch_up,  # type: ignore[arg-type]  # checked against CATCH_UPS above
        cron=None if cron is None else cronlib.parse(cron),
        every=every,
        tz=_zone(tz),
    )


class Schedules(Mapping[str, Schedule]):
    """An app's schedules by name: ``app.schedules``."""

    def __init__(self) -> None:
        self._by_name: dict[str, Schedule] = {}

    def __getitem__(self, name: str) -> Schedule:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def decorator(
        self,
        *,
        cron: str | None = None,
        every: timedelta | None = None,
        tz: str | ZoneInfo | None = None,
        catch_up: str = DEFAULT_CATCH_UP,
        name: str | None = None,
    ) -> Callable[[F], F]:
        """What :meth:`rabbitq.App.schedule` returns: registers the decorated function."""
        # fail at the decorator line, before the function is known
        check(cron=cron, every=every, tz=tz, catch_up=catch_up, label=name or "schedule")

        def register(fn: F) -> F:
            schedule = make(fn, cron=cron, every=every, tz=tz, catch_up=catch_up, name=name)
            if schedule.name in self._by_name:
                raise ConfigurationError(f"there is already a schedule named {schedule.name!r}")
            self._by_name[schedule.name] = schedule
            return fn

        return register


class ScheduledApp(Protocol):
    """What the scheduler reads of an :class:`~rabbitq.App` (a protocol, so that
    ``rabbitq.schedule`` never imports the app that imports it)."""

    @property
    def queue(self) -> str: ...
    @property
    def exchange(self) -> str: ...
    @property
    def queue_type(self) -> str: ...
    @property
    def tls(self) -> TLS | None: ...
    @property
    def schedules(self) -> Schedules: ...
    def resolved_url(self, override: str | None = None) -> str: ...
