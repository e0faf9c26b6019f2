"""An outbox's pending rows as an operator sees and acts on them: list, retry, discard.

``rabbitq outbox list / retry / discard MODULE:APP`` call these. A row the broker refused
(unroutable: nothing is bound to its type yet) waits in its own backoff; once the cause is
fixed, :func:`retry` makes it due at once, and :func:`discard` deletes rows that should
never be sent (the later rows of their keys then go). Rows already sent are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql

from ..errors import ConfigurationError
from .outbox import Outbox


@dataclass(frozen=True, slots=True)
class Selection:
    """Which pending rows: those with one of ``ids``, of ``type``, that ``failing``
    (failed at least once); the conditions given all hold. ``everything`` selects every
    pending row, and must be said explicitly to retry or discard them all."""

    ids: tuple[int, ...] = ()
    type: str | None = None
    failing: bool = False
    everything: bool = False

    @property
    def narrowed(self) -> bool:
        """A condition was given."""
        return bool(self.ids) or self.type is not None or self.failing

    def where(self) -> tuple[sql.Composable, dict[str, Any]]:
        """The SQL condition and its parameters (pure)."""
        parts: list[sql.Composable] = []
        params: dict[str, Any] = {}
        if self.ids:
            parts.append(sql.SQL("id = ANY(%(ids)s)"))
            params["ids"] = list(self.ids)
        if self.type is not None:
            parts.append(sql.SQL("type = %(type)s"))
            params["type"] = self.type
        if self.failing:
            parts.append(sql.SQL("attempts > 0"))
        if not parts:
            return sql.SQL("true"), params
        return sql.SQL(" AND ").join(parts), params

    def check_acting(self, verb: str) -> None:
        """Refuse to ``verb`` every pending row unless ``everything`` says so."""
        if not self.narrowed and not self.everything:
            raise ConfigurationError(
                f"say which rows to {verb}: --id N, --type TYPE, --failing, or --all"
            )


@dataclass(frozen=True, slots=True)
class PendingRow:
    """A row not yet sent, as listed."""

    id: int
    type: str
    key: str | None
    message_id: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    last_error: str | None


async def list_pending(
    outbox: Outbox, selection: Selection, *, limit: int = 100
) -> list[PendingRow]:
    """The selected pending rows, oldest first, at most ``limit`` (0: all)."""
    where, params = selection.where()
    params["limit"] = limit if limit > 0 else None
    async with outbox.db.connection() as conn:
        cur = await conn.execute(outbox.sql.listing(where), params)
        return [PendingRow(*r) for r in await cur.fetchall()]


async def retry(outbox: Outbox, selection: Selection) -> int:
    """End the backoff of the selected rows: the relay tries them at once. How many."""
    selection.check_acting("retry")
    where, params = selection.where()
    async with outbox.db.connection() as conn:
        cur = await conn.execute(outbox.sql.retry(where), params)
        return cur.rowcount


async def discard(outbox: Outbox, selection: Selection) -> list[tuple[int, str, str]]:
    """Delete the selected pending rows; (id, type, message_id) of each deleted."""
    selection.check_acting("discard")
    where, params = selection.where()
    async with outbox.db.connection() as conn, conn.transaction():
        cur = await conn.execute(outbox.sql.discard(where), params)
        return sorted((int(r[0]), str(r[1]), str(r[2])) for r in await cur.fetchall())
