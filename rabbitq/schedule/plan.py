"""The scheduler's decisions and names, as plain data (pure, no I/O).

- :func:`lease_queue` / :func:`progress_queue`: the two queues of an app's schedules;
- :func:`encode_progress` / :func:`decode_progress` / :func:`merge`: the progress
  record, the last tick published of every schedule;
- :func:`catch_up`: which missed ticks a new leader publishes;
- :func:`fence` / :func:`writer_of` / :func:`lease_expired`: whether a leader still
  holds the schedules, and when a leader that lost them may contend again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson

from .spec import Schedule

# catch_up="all" publishes at most this many missed ticks of a schedule (the most
# recent ones); older ones are skipped and counted.
CATCH_UP_LIMIT = 1000
# A tick published more than this many seconds after its time counts as late.
LATE_AFTER = 1.0
# How far back a new leader looks for a cron schedule's missed ticks.
HORIZON = timedelta(days=31)
PROGRESS_TYPE = "rabbitq.schedule.progress"


def lease_queue(queue: str) -> str:
    """The exclusive queue whose holder leads ``queue``'s schedules."""
    return f"{queue}.schedules.lease"


def progress_queue(queue: str) -> str:
    """The durable queue holding the progress record of ``queue``'s schedules."""
    return f"{queue}.schedules"


def progress_arguments(queue_type: str) -> dict[str, Any]:
    """The progress queue's arguments: the app's queue type, one message kept.

    Each record supersedes the last, so ``x-max-length: 1`` (drop-head) keeps the queue
    at one message without anyone consuming it; readers merge whatever they find.
    """
    return {"x-queue-type": queue_type, "x-max-length": 1}


@dataclass(frozen=True, kw_only=True, slots=True)
class Progress:
    """Through which tick each schedule was handled (``ticks``: every tick at or before
    it was published or skipped), the last tick actually published (``published``),
    and who wrote the record when."""

    ticks: Mapping[str, datetime]
    published: Mapping[str, datetime] = field(default_factory=dict)
    leader: str = ""
    written: datetime | None = None


def encode_progress(progress: Progress) -> bytes:
    """The record's JSON body."""
    return orjson.dumps(
        {
            "ticks": _times(progress.ticks),
            "published": _times(progress.published),
            "leader": progress.leader,
            "written": None if progress.written is None else progress.written.isoformat(),
        }
    )


def _times(ticks: Mapping[str, datetime]) -> dict[str, str]:
    return {name: t.astimezone(UTC).isoformat() for name, t in ticks.items()}


def _read_times(data: object) -> dict[str, datetime]:
    times = {str(k): datetime.fromisoformat(v) for k, v in dict(data or {}).items()}  # type: ignore[call-overload]
    return {k: v for k, v in times.items() if v.tzinfo is not None}


def decode_progress(body: bytes) -> Progress | None:
    """A record read back; None for one that is not a progress record."""
    try:
        data = orjson.loads(body)
        written = data.get("written")
        return Progress(
            ticks=_read_times(data["ticks"]),
            published=_read_times(data.get("published")),
            leader=str(data.get("leader", "")),
            written=None if written is None else datetime.fromisoformat(written),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


def _latest(into: dict[str, datetime], ticks: Mapping[str, datetime]) -> None:
    for name, tick in ticks.items():
        if name not in into or tick > into[name]:
            into[name] = tick


def merge(records: Iterable[Progress]) -> Progress:
    """The latest tick of each schedule over several records (ticks only move forward),
    with the leader of the most recently written one."""
    ticks: dict[str, datetime] = {}
    published: dict[str, datetime] = {}
    newest: Progress | None = None
    for record in records:
        _latest(ticks, record.ticks)
        _latest(published, record.published)
        if record.written is not None and (
            newest is None or newest.written is None or record.written > newest.written
        ):
            newest = record
    return Progress(
        ticks=ticks,
        published=published,
        leader="" if newest is None else newest.leader,
        written=None if newest is None else newest.written,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class CatchUp:
    """What a new leader does about one schedule: publish ``ticks`` now (oldest first),
    skip ``skipped`` missed ones, then continue from ``after``."""

    ticks: tuple[datetime, ...]
    skipped: int
    after: datetime


def catch_up(schedule: Schedule, last: datetime | None, now: datetime) -> CatchUp:
    """Which of the ticks missed since ``last`` (the last one published) are published.

    A schedule never published starts with its next tick after ``now``. Otherwise the
    missed ticks are those in ``(last, now]``: ``"all"`` publishes them (at most the
    :data:`CATCH_UP_LIMIT` most recent), ``"last"`` the most recent one, ``"none"`` none.
    A cron schedule's missed ticks are looked for in the :data:`HORIZON` before ``now``
    only (an ``every`` schedule's are counted by arithmetic).
    """
    if last is None:
        return CatchUp(ticks=(), skipped=0, after=now)
    after = max(last, now)
    keep = {"none": 0, "last": 1, "all": CATCH_UP_LIMIT}[schedule.catch_up]
    count = schedule.count(last, now)
    if count is not None:  # every=: the kept ticks are the last `keep` periods
        assert schedule.every is not None
        start = max(last, now - keep * schedule.every)
        ticks = tuple(schedule.ticks(start, now)) if keep else ()
        return CatchUp(ticks=ticks, skipped=count - len(ticks), after=after)
    recent: deque[datetime] = deque(maxlen=keep)
    seen = 0
    for tick in schedule.ticks(max(last, now - HORIZON), now):
        recent.append(tick)
        seen += 1
    return CatchUp(ticks=tuple(recent), skipped=seen - len(recent), after=after)


def lateness(tick: datetime, published: datetime) -> float:
    """Seconds between a tick's time and its publish (never negative)."""
    return max(0.0, (published - tick).total_seconds())


Fence = Literal["held", "taken", "absent"]


def fence(record: Progress | None, *, leader: str, written: datetime | None) -> Fence:
    """What the progress record read back before a commit says (pure).

    ``"held"``: it is the one this leader wrote last (``leader``, ``written``): nobody
    committed since, and this leader, holding it unacked, is the only one who can now.
    ``"taken"``: another leader committed since: this one must step down without
    committing. ``"absent"``: no record (another reader holds it for a moment, or a
    leader's commit is in flight): look again, and step down if it stays away.
    """
    if record is None:
        return "absent"
    if record.leader == leader and written is not None and record.written == written:
        return "held"
    return "taken"


def writer_of(record: Progress | None) -> tuple[str, str] | None:
    """Who wrote ``record`` when (None for no record): what a standby watches change."""
    if record is None:
        return None
    return record.leader, "" if record.written is None else record.written.isoformat()


def lease_expired(unchanged_since: float, now: float, period: float) -> bool:
    """Whether the record has stayed the same for ``period`` seconds (monotonic
    times of the watcher's own clock): its writer stopped renewing it."""
    return now - unchanged_since >= period
