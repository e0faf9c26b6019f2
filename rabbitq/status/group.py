"""A workflow group's progress, folded from its messages' records (pure, no I/O).

A group's members are the messages recorded with its id as ``group_id`` (their
``rabbitq-group`` header); its callbacks are those recorded with it as ``callback_of``
(a chord's callback and its ``on_failure`` message carry ``rabbitq-callback-of``). A
store reads at most :data:`MAX_MEMBERS` members of a group, with all their records,
and says how many it holds (:class:`GroupRecords`); :func:`fold_group` makes the
:class:`GroupStatus` that :meth:`rabbitq.App.status` answers for a group id.

The status store knows the messages it has records of: a member is counted once any
record of it was written (its ``published`` record, when the publisher's app has the
store), and a callback that has not been published yet is not known at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .model import DUPLICATE, STATES, SUCCEEDED, MessageStatus, Record, fold

MAX_MEMBERS = 10_000  # members of one group read at most (with all their records)
SHOWN_MEMBERS = 50  # members listed by `rabbitq status` (its --json lists all read)
DONE = frozenset({SUCCEEDED, DUPLICATE})  # a duplicate's key was handled before


@dataclass(frozen=True, slots=True)
class GroupRecords:
    """What a store reads for a group: the records of at most ``limit`` of its members
    and of its callbacks, and ``total``, the members it holds (more than were read when
    the group is larger than the limit)."""

    records: list[Record] = field(default_factory=list)
    total: int = 0


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """What :meth:`rabbitq.App.status` answers for a group id.

    ``total`` is the number of members the store holds; ``members`` those read (at most
    :data:`MAX_MEMBERS`), those that have not succeeded first, then in the order they
    were first recorded; ``counts`` the members read by current state (in the order of
    :data:`~rabbitq.status.model.STATES`); ``callbacks`` the chord's callback and its
    ``on_failure`` message, those recorded so far, oldest first (each says its
    ``type_name``).
    """

    group_id: str
    total: int
    counts: Mapping[str, int]
    members: tuple[MessageStatus, ...]
    callbacks: tuple[MessageStatus, ...] = ()

    @property
    def succeeded(self) -> int:
        """Members read that succeeded (a ``duplicate`` counts: its key was done before)."""
        return sum(self.counts.get(state, 0) for state in DONE)

    @property
    def more(self) -> int:
        """Members the store holds beyond those read."""
        return max(0, self.total - len(self.members))

    @property
    def complete(self) -> bool:
        """Whether every member succeeded and so did every callback recorded."""
        members_done = bool(self.members) and self.more == 0 and self.succeeded == self.total
        return members_done and all(c.state in DONE for c in self.callbacks)

    def to_json(self, *, histories: bool = False) -> dict[str, Any]:
        """As a JSON object (``rabbitq status --json``): each member's id, state,
        attempts and type (with ``histories``, its whole status), each callback's
        whole status."""
        return {
            "group_id": self.group_id,
            "total": self.total,
            "read": len(self.members),
            "complete": self.complete,
            "counts": dict(self.counts),
            "callbacks": [c.to_json() for c in self.callbacks],
            "members": [m.to_json() if histories else summary(m) for m in self.members],
        }


def summary(member: MessageStatus) -> dict[str, Any]:
    """A member in one JSON object: id, state, attempts, type."""
    return {
        "message_id": member.message_id,
        "state": member.state,
        "attempts": member.attempts,
        "type": member.type_name,
    }


def fold_group(group_id: str, read: GroupRecords) -> GroupStatus | None:
    """The progress that ``read`` describes; None if it holds no record."""
    by_message: dict[str, list[Record]] = {}
    for r in read.records:
        by_message.setdefault(r.message_id, []).append(r)
    members: list[MessageStatus] = []
    callbacks: list[MessageStatus] = []
    for message_id, records in by_message.items():
        status = fold(message_id, records)
        if status is None:
            continue
        if status.callback_of == group_id and not any(r.group_id == group_id for r in records):
            callbacks.append(status)
        else:
            members.append(status)
    if not members and not callbacks:
        return None
    members.sort(key=lambda m: (m.state in DONE, m.history[0].at, m.message_id))
    callbacks.sort(key=lambda c: (c.history[0].at, c.message_id))
    found: dict[str, int] = {}
    for m in members:
        found[m.state] = found.get(m.state, 0) + 1
    order = {state: i for i, state in enumerate(STATES)}
    counts = dict(sorted(found.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
    return GroupStatus(
        group_id=group_id,
        total=max(read.total, len(members)),
        counts=counts,
        members=tuple(members),
        callbacks=tuple(callbacks),
    )


def group_lines(status: GroupStatus, *, shown: int = SHOWN_MEMBERS) -> list[str]:
    """``status`` as lines of text: a summary, the counts, each callback, then at most
    ``shown`` members and a line saying how many more (pure)."""
    counts = ", ".join(f"{state} {n}" for state, n in status.counts.items()) or "none read"
    done = "complete" if status.complete else "not complete"
    lines = [
        f"group {status.group_id}: {status.total} member(s), {status.succeeded} succeeded, {done}",
        f"members by state: {counts}",
    ]
    if status.more:
        lines.append(f"(counted: the {len(status.members)} members read of {status.total})")
    if not status.callbacks:
        lines.append("callback: none recorded (not a chord, or not published yet)")
    for c in status.callbacks:
        lines.append(f"callback {c.message_id} ({c.type_name or '?'}): {c.state}")
    listed = status.members[:shown]
    if listed:
        lines.append("members (not succeeded first):")
    width = max((len(m.message_id) for m in listed), default=0)
    for m in listed:
        kind = f"  {m.type_name}" if m.type_name else ""
        lines.append(
            f"  {m.message_id:<{width}}  {m.state:<13} {m.attempts} attempt(s){kind}".rstrip()
        )
    hidden = status.total - len(listed)
    if hidden > 0:
        lines.append(f"  … and {hidden} more")
    return lines
