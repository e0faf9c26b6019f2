"""The status model: records folded into a state, attempts and a history (pure)."""

from __future__ import annotations

from rabbitq.status.model import (
    DEAD_LETTERED,
    PUBLISHED,
    RECEIVED,
    REPLAYED,
    RETRYING,
    STARTED,
    SUCCEEDED,
    Record,
    fold,
    history_lines,
    label_seconds,
    short_error,
)


def _life() -> list[Record]:
    return [
        Record("m1", PUBLISHED, 10.0, None, {"type": "t"}),
        Record("m1", RECEIVED, 11.0, 1, {"queue": "q"}),
        Record("m1", STARTED, 11.0, 1),
        Record("m1", RETRYING, 11.5, 1, {"delay": "1s", "error": "OSError: down"}),
        Record("m1", RECEIVED, 12.5, 2),
        Record("m1", STARTED, 12.5, 2),
        Record("m1", DEAD_LETTERED, 12.6, 2, {"reason": "exhausted"}),
        Record("m1", REPLAYED, 20.0, None, {"queue": "q"}),
        Record("m1", RECEIVED, 20.1, 1),
        Record("m1", STARTED, 20.1, 1),
        Record("m1", SUCCEEDED, 20.2, 1, {"duration": 0.1}),
    ]


def test_the_current_state_is_the_latest_record_whatever_order_they_come_in():
    status = fold("m1", reversed(_life()))
    assert status is not None
    assert status.state == SUCCEEDED and status.final
    assert [e.state for e in status.history] == [r.state for r in _life()]
    assert status.attempts == 2  # the highest attempt started


def test_records_of_the_same_instant_are_ordered_as_a_message_lives():
    status = fold("m", [Record("m", STARTED, 5.0, 1), Record("m", RECEIVED, 5.0, 1)])
    assert status is not None
    assert [e.state for e in status.history] == [RECEIVED, STARTED]
    assert status.state == STARTED and not status.final


def test_no_records_is_no_status():
    assert fold("m", []) is None


def test_the_json_form_has_every_entry_in_utc():
    status = fold("m1", _life())
    assert status is not None
    data = status.to_json()
    assert data["state"] == SUCCEEDED and len(data["history"]) == 11
    assert data["history"][0] == {
        "state": PUBLISHED,
        "at": "1970-01-01T00:00:10+00:00",
        "attempt": None,
        "detail": {"type": "t"},
    }


def test_the_text_form_is_a_summary_and_a_line_per_entry():
    status = fold("m1", _life())
    assert status is not None
    lines = history_lines(status)
    assert lines[0] == "message m1: succeeded (2 attempt(s) started)"
    assert len(lines) == 12
    assert "retrying" in lines[4] and "#1" in lines[4] and "delay=1s" in lines[4]


def test_retry_labels_are_read_back_as_seconds():
    assert [label_seconds(x) for x in ("1s", "90s", "2m", "1500ms", "1h")] == [
        1.0, 90.0, 120.0, 1.5, 3600.0,
    ]  # fmt: skip
    assert label_seconds("37.5s") == 37.5
    assert label_seconds("soon") is None


def test_long_errors_are_cut():
    assert short_error(None) is None
    cut = short_error("x" * 2000)
    assert cut is not None and len(cut) == 500


def test_a_details_time_reads_as_iso_8601_in_utc():
    from rabbitq.status.model import detail_text

    text = detail_text({"next_at": 1795788608.72, "delay": "1s", "gone": None})
    assert text == "next_at=2026-11-27T14:10:08.720Z delay=1s"
