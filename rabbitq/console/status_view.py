"""The status histories the console shows (``App(status=...)``): read from each app's
status store while a page is served, then closed (the console holds no connection). A
search may find a workflow group instead (:mod:`.workflow_view`).

A store that cannot be read is one line on the page, never an error page: the status
is best effort, the DLQ message beside it is what the operator acts on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..cancellation.cancel import can_cancel
from ..crypto.codec import cipher_of, shown_text
from ..dlq.text import escape
from ..status.group import GroupStatus
from ..status.lookup import lookup, message_status
from ..status.model import MessageStatus, detail_text
from ..tracing.base import Tracing
from .workflow_view import GroupView, group_view

MAX_ID = 200  # characters of a searched message id


@dataclass(frozen=True, slots=True)
class EntryView:
    """One line of a history, as shown (strings escaped of control characters)."""

    at: str
    state: str
    attempt: str
    detail: str


@dataclass(frozen=True, slots=True)
class HistoryView:
    """One app's answer for a message id."""

    label: str
    found: bool
    state: str = "-"
    attempts: int = 0
    entries: tuple[EntryView, ...] = ()
    error: str | None = None
    cancellable: bool = False  # App(cancellable=True) and not finished: a cancel button
    message_id: str = ""


async def histories(statuses: Sequence[tuple[str, Any]], message_id: str) -> list[HistoryView]:
    """The history of the message ``message_id`` in each ``(MODULE:APP, app)``'s status
    store."""
    _, found = await search(statuses, message_id, groups=False)
    return found


async def search(
    statuses: Sequence[tuple[str, Any]], key: str, *, groups: bool = True
) -> tuple[list[GroupView], list[HistoryView]]:
    """The workflow group ``key`` in each app's status store that has one (with
    ``groups``), and the history of the message ``key`` in each of the others."""
    found_groups: list[GroupView] = []
    found: list[HistoryView] = []
    for label, app in statuses:
        store = app.status_writer.store
        status: MessageStatus | GroupStatus | None
        try:
            status = await (lookup(store, key) if groups else message_status(store, key))
        except Exception as exc:  # the store is down, or refuses: one line, not a 500
            found.append(HistoryView(label, False, error=escape(f"{type(exc).__name__}: {exc}")))
            continue
        finally:
            await store.close()
        can = can_cancel(app)
        if isinstance(status, GroupStatus):
            found_groups.append(group_view(label, status))
        elif status is None:
            found.append(HistoryView(label, False, cancellable=can, message_id=key))
        else:
            view = history_view(label, status, cipher_of(app))
            pending = can and not status.final
            found.append(dataclasses.replace(view, cancellable=pending, message_id=key))
    return found_groups, found


def history_view(label: str, status: MessageStatus, cipher: Any = None) -> HistoryView:
    """One app's history of a message, as shown (pure but for decrypting: an encrypted
    app's errors in clear with its ``cipher``, else ``encrypted (key K)``)."""
    entries = tuple(
        EntryView(
            at=e.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC",
            state=e.state,
            attempt="" if e.attempt is None else str(e.attempt),
            detail=escape(shown_text(detail_text(e.detail), status.message_id, cipher)),
        )
        for e in status.history
    )
    return HistoryView(label, True, status.state, status.attempts, entries)


def tracing_for(statuses: Sequence[tuple[str, Any]], dlq: str) -> Tracing | None:
    """The tracing of the app whose DLQ is ``dlq``, if it has a status store: the console's
    replays and purges are then recorded in that store (pure)."""
    for _label, app in statuses:
        if app.topology().dlq.name == dlq:
            tracing: Tracing = app.tracing
            return tracing
    return None
