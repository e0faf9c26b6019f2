"""A workflow group's progress folded from its messages' records: members by state, the
callbacks apart, the members not succeeded first, the bound, and the text form."""

from __future__ import annotations

from rabbitq.status.group import GroupRecords, GroupStatus, fold_group, group_lines
from rabbitq.status.model import (
    DEAD_LETTERED,
    DUPLICATE,
    PUBLISHED,
    PURGED,
    RECEIVED,
    RETRYING,
    STARTED,
    SUCCEEDED,
    Record,
)

G = "g1"


def _member(mid: str, *states: str, at: float = 10.0, group: str | None = G) -> list[Record]:
    out = [Record(mid, PUBLISHED, at, None, {"type": "capture"}, group)]
    for i, state in enumerate(states, start=1):
        out.append(Record(mid, state, at + i, 1 if state != PURGED else None, {}, group))
    return out


def _callback(mid: str, *states: str, at: float = 50.0) -> list[Record]:
    out = [Record(mid, PUBLISHED, at, None, {"type": "receipt"}, None, G)]
    out += [Record(mid, s, at + i, 1, {}, None, G) for i, s in enumerate(states, start=1)]
    return out


def _fold(records: list[Record], total: int = 0) -> GroupStatus:
    status = fold_group(G, GroupRecords(records, total))
    assert status is not None
    return status


def test_members_are_counted_by_their_current_state_and_the_callback_is_apart():
    records = [
        *_member("a", RECEIVED, STARTED, SUCCEEDED, at=1.0),
        *_member("b", RECEIVED, STARTED, RETRYING, at=2.0),
        *_member("c", RECEIVED, STARTED, DEAD_LETTERED, at=3.0),
        *_member("d", RECEIVED, STARTED, SUCCEEDED, DUPLICATE, at=4.0),
        *_callback("cb"),
    ]
    status = _fold(records, total=4)
    assert status.total == 4 and status.more == 0
    assert dict(status.counts) == {RETRYING: 1, SUCCEEDED: 1, DUPLICATE: 1, DEAD_LETTERED: 1}
    assert list(status.counts) == [RETRYING, SUCCEEDED, DUPLICATE, DEAD_LETTERED]  # STATES order
    assert status.succeeded == 2 and not status.complete
    assert [m.message_id for m in status.members] == ["b", "c", "a", "d"]  # not done first
    assert [c.message_id for c in status.callbacks] == ["cb"]
    assert status.callbacks[0].callback_of == G and status.callbacks[0].type_name == "receipt"
    assert status.members[0].group_id == G and status.members[0].type_name == "capture"


def test_a_group_is_complete_once_every_member_and_every_callback_succeeded():
    members = [*_member("a", SUCCEEDED), *_member("b", SUCCEEDED)]
    assert _fold(members, total=2).complete
    assert not _fold([*members, *_callback("cb", RECEIVED)], total=2).complete
    assert _fold([*members, *_callback("cb", SUCCEEDED)], total=2).complete
    assert not _fold(members, total=3).complete  # a member the store holds was not read


def test_a_purged_record_without_a_group_still_belongs_to_its_member():
    records = [*_member("a", DEAD_LETTERED), Record("a", PURGED, 99.0, None, {"queue": "q.dlq"})]
    status = _fold(records, total=1)
    assert dict(status.counts) == {PURGED: 1}


def test_more_members_than_read_are_reported_and_listed_as_more():
    records = [r for i in range(3) for r in _member(f"m{i}", SUCCEEDED, at=float(i))]
    status = _fold(records, total=10_500)
    assert status.total == 10_500 and status.more == 10_497 and not status.complete
    lines = group_lines(status, shown=2)
    assert lines[0] == f"group {G}: 10500 member(s), 3 succeeded, not complete"
    assert "(counted: the 3 members read of 10500)" in lines
    assert lines[-1] == "  … and 10498 more"


def test_no_records_is_no_group():
    assert fold_group(G, GroupRecords([], 0)) is None


def test_the_text_form_has_the_counts_the_callback_and_a_line_per_member():
    records = [
        *_member("a", SUCCEEDED, at=1.0),
        *_member("bb", DEAD_LETTERED, at=2.0),
        *_callback("cb"),
    ]
    lines = group_lines(_fold(records, total=2))
    assert lines[0] == f"group {G}: 2 member(s), 1 succeeded, not complete"
    assert lines[1] == "members by state: succeeded 1, dead_lettered 1"
    assert lines[2] == "callback cb (receipt): published"
    assert lines[3] == "members (not succeeded first):"
    assert lines[4].split() == ["bb", "dead_lettered", "0", "attempt(s)", "capture"]
    assert len(lines) == 6
    only = group_lines(_fold(_member("a", SUCCEEDED), total=1))
    assert "callback: none recorded (not a chord, or not published yet)" in only


def test_the_json_form_lists_member_summaries_and_whole_callbacks():
    data = _fold([*_member("a", SUCCEEDED), *_callback("cb", SUCCEEDED)], total=1).to_json()
    assert data["group_id"] == G and data["total"] == 1 and data["read"] == 1
    assert data["complete"] is True and data["counts"] == {SUCCEEDED: 1}
    assert data["members"] == [
        {"message_id": "a", "state": SUCCEEDED, "attempts": 0, "type": "capture"}
    ]
    assert data["callbacks"][0]["callback_of"] == G
    assert [e["state"] for e in data["callbacks"][0]["history"]] == [PUBLISHED, SUCCEEDED]


def test_the_json_form_can_carry_each_members_whole_history():
    data = _fold(_member("a", RECEIVED, SUCCEEDED), total=1).to_json(histories=True)
    assert [e["state"] for e in data["members"][0]["history"]] == [PUBLISHED, RECEIVED, SUCCEEDED]
    assert data["members"][0]["group_id"] == G
