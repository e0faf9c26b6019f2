"""The scheduler's pure decisions: catch-up, the progress record, queue names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from rabbitq import App
from rabbitq.schedule import plan
from rabbitq.schedule.spec import Schedule

NOW = datetime(2026, 11, 25, 8, 0, 0, 300000, tzinfo=UTC)


def schedule(catch_up: str, **when: object) -> Schedule:
    app = App(queue="schedule-plan")

    def job(tick: datetime) -> None:
        return None

    app.schedule(catch_up=catch_up, **when)(job)  # type: ignore[arg-type]
    return app.schedules["job"]


def test_a_schedule_never_published_starts_after_now_whatever_its_policy():
    for policy in ("none", "last", "all"):
        decision = plan.catch_up(schedule(policy, every=timedelta(seconds=1)), None, NOW)
        assert decision == plan.CatchUp(ticks=(), skipped=0, after=NOW)


@pytest.mark.parametrize(
    ("policy", "published", "skipped"),
    [("all", 10, 0), ("last", 1, 9), ("none", 0, 10)],
)
def test_ten_missed_seconds(policy, published, skipped):
    last = datetime(2026, 11, 25, 7, 59, 50, tzinfo=UTC)
    decision = plan.catch_up(schedule(policy, every=timedelta(seconds=1)), last, NOW)
    assert len(decision.ticks) == published and decision.skipped == skipped
    assert decision.after == NOW
    if published:
        assert decision.ticks[-1] == datetime(2026, 11, 25, 8, tzinfo=UTC)
        assert list(decision.ticks) == sorted(decision.ticks)
        assert decision.ticks[0] > last


def test_all_is_bounded_to_the_most_recent_thousand():
    last = NOW - timedelta(days=30)
    decision = plan.catch_up(schedule("all", every=timedelta(seconds=1)), last, NOW)
    assert len(decision.ticks) == plan.CATCH_UP_LIMIT == 1000
    assert decision.ticks[-1] == datetime(2026, 11, 25, 8, tzinfo=UTC)
    assert decision.ticks[0] == datetime(2026, 11, 25, 7, 43, 21, tzinfo=UTC)
    assert decision.skipped == 30 * 86400 - 1000


def test_cron_catch_up_counts_the_weekday_mornings_missed():
    s = schedule("all", cron="0 9 * * MON-FRI", tz="Europe/Berlin")
    last = datetime(2026, 11, 13, 9, tzinfo=ZoneInfo("Europe/Berlin"))  # a Friday
    decision = plan.catch_up(s, last, NOW)  # Wednesday 25th, 09:00 Berlin
    assert [t.day for t in decision.ticks] == [16, 17, 18, 19, 20, 23, 24, 25]
    last_only = plan.catch_up(
        schedule("last", cron="0 9 * * MON-FRI", tz="Europe/Berlin"), last, NOW
    )
    assert [t.day for t in last_only.ticks] == [25] and last_only.skipped == 7


def test_the_progress_record_round_trips_and_merges_to_the_latest_tick():
    t1, t2 = NOW - timedelta(seconds=5), NOW
    a = plan.Progress(ticks={"x": t1, "y": t2}, published={"x": t1}, leader="a:1", written=t1)
    b = plan.Progress(ticks={"x": t2}, published={"x": t2}, leader="b:2", written=t2)
    assert plan.decode_progress(plan.encode_progress(a)) == a
    merged = plan.merge([b, a])
    assert merged.ticks == {"x": t2, "y": t2} and merged.published == {"x": t2}
    assert merged.leader == "b:2"
    assert plan.merge([]) == plan.Progress(ticks={})


@pytest.mark.parametrize("body", [b"", b"[]", b'{"ticks": 3}', b'{"ticks": {"x": "noon"}}'])
def test_a_record_that_is_not_one_is_ignored(body):
    assert plan.decode_progress(body) is None


def test_queue_names_and_arguments():
    assert plan.lease_queue("emails") == "emails.schedules.lease"
    assert plan.progress_queue("emails") == "emails.schedules"
    assert plan.progress_arguments("quorum") == {"x-queue-type": "quorum", "x-max-length": 1}


def test_lateness_is_never_negative():
    assert plan.lateness(NOW, NOW - timedelta(seconds=1)) == 0.0
    assert plan.lateness(NOW, NOW + timedelta(seconds=2)) == 2.0


def test_catching_up_across_daylight_saving_neither_doubles_nor_invents_a_tick():
    berlin = ZoneInfo("Europe/Berlin")
    s = schedule("all", cron="*/30 * * * *", tz="Europe/Berlin")
    autumn = plan.catch_up(
        s,
        datetime(2026, 10, 25, 1, 30, tzinfo=berlin),
        datetime(2026, 10, 25, 3, 10, tzinfo=berlin).astimezone(UTC),
    )
    assert [t.strftime("%H:%M%z") for t in autumn.ticks] == [
        "02:00+0200",
        "02:30+0200",
        "03:00+0100",
    ]
    spring = plan.catch_up(
        s,
        datetime(2026, 3, 29, 1, 30, tzinfo=berlin),
        datetime(2026, 3, 29, 3, 40, tzinfo=berlin).astimezone(UTC),
    )
    assert [t.strftime("%H:%M%z") for t in spring.ticks] == ["03:00+0200", "03:30+0200"]


# -- the fence: whether a leader still holds the schedules -------------------------------

WROTE = datetime(2026, 12, 6, 22, 0, 1, 123456, tzinfo=UTC)


def _record(leader: str, written: datetime | None) -> plan.Progress:
    return plan.Progress(ticks={}, leader=leader, written=written)


def test_the_record_this_leader_wrote_last_proves_it_holds_the_schedules():
    assert plan.fence(_record("a:1", WROTE), leader="a:1", written=WROTE) == "held"


def test_a_record_read_back_through_json_still_proves_it():
    body = plan.encode_progress(_record("a:1", WROTE))
    assert plan.fence(plan.decode_progress(body), leader="a:1", written=WROTE) == "held"


def test_another_leaders_record_means_the_schedules_were_taken():
    assert plan.fence(_record("b:2", WROTE), leader="a:1", written=WROTE) == "taken"


def test_an_older_or_newer_record_of_the_same_name_was_not_the_last_one_written():
    later = WROTE + timedelta(seconds=1)
    assert plan.fence(_record("a:1", later), leader="a:1", written=WROTE) == "taken"
    assert plan.fence(_record("a:1", WROTE), leader="a:1", written=None) == "taken"


def test_no_record_is_absent_not_taken():
    assert plan.fence(None, leader="a:1", written=WROTE) == "absent"


def test_a_standby_watches_who_wrote_the_record_when():
    assert plan.writer_of(None) is None
    assert plan.writer_of(_record("b:2", WROTE)) == ("b:2", WROTE.isoformat())
    assert plan.writer_of(_record("b:2", WROTE)) != plan.writer_of(
        _record("b:2", WROTE + timedelta(seconds=1))
    )


def test_the_lease_expires_once_the_record_stood_still_for_the_period():
    assert not plan.lease_expired(10.0, 12.9, 3.0)
    assert plan.lease_expired(10.0, 13.0, 3.0)
