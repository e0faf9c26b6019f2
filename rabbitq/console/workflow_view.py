"""A workflow group's progress as the console shows it (``/status?id=GROUP_ID``): its
members by state, its callbacks' state, and the members that have not succeeded first,
each linking to its own status (pure: made from a :class:`~rabbitq.status.GroupStatus`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dlq.text import escape
from ..status.group import GroupStatus
from ..status.model import MessageStatus

SHOWN_MEMBERS = 200  # members listed on the page; the counts cover every member read


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member or callback: its id (as searched), its state, attempts and type."""

    message_id: str
    state: str
    attempts: int
    type_name: str


@dataclass(frozen=True, slots=True)
class GroupView:
    """One app's answer for a group id."""

    label: str
    group_id: str
    total: int
    read: int
    succeeded: int
    complete: bool
    counts: tuple[tuple[str, int], ...]
    callbacks: tuple[MemberView, ...]
    members: tuple[MemberView, ...]
    more: int  # members held but not listed


def member_view(status: MessageStatus) -> MemberView:
    """A member's line (``message_id`` unescaped: the link searches for it; the page's
    ``finalize`` escapes what is shown)."""
    return MemberView(
        message_id=status.message_id,
        state=status.state,
        attempts=status.attempts,
        type_name=escape(status.type_name or ""),
    )


def group_view(label: str, status: GroupStatus, *, shown: int = SHOWN_MEMBERS) -> GroupView:
    """What the page shows of ``status``: at most ``shown`` members."""
    members = tuple(member_view(m) for m in status.members[:shown])
    return GroupView(
        label=label,
        group_id=status.group_id,
        total=status.total,
        read=len(status.members),
        succeeded=status.succeeded,
        complete=status.complete,
        counts=tuple(status.counts.items()),
        callbacks=tuple(member_view(c) for c in status.callbacks),
        members=members,
        more=status.total - len(members),
    )
