"""The console's outbox page (``/outbox``): each app's outbox, how many rows wait, and the
rows the broker refused (each in its own backoff), read-only.

Acting on rows is ``rabbitq outbox retry / discard MODULE:APP``; the page shows the
command for each row. The outbox's database is reached only while a page is served (a
pool opened and closed per request): the console holds no database connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..dlq.text import escape
from ..errors import RabbitqError
from ..settings import redact_url, scrub, url_password
from .pages import templates
from .security import COOKIE, CSRF_FIELD
from .state import State

MAX_ROWS = 200  # refused rows listed per outbox


@dataclass(frozen=True, slots=True)
class RowView:
    """A refused row as shown (every string escaped of control characters)."""

    id: int
    type: str
    key: str
    attempts: int
    age: str
    next_try: str
    error: str


@dataclass(frozen=True, slots=True)
class OutboxView:
    """One app's outbox on the page."""

    label: str
    table: str
    pending: int = 0
    failing: int = 0
    oldest: str = "-"
    rows: tuple[RowView, ...] = ()
    error: str | None = None


def _span(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def row_view(row: Any, now: datetime) -> RowView:
    """A :class:`~rabbitq.effects.pending.PendingRow` as shown (pure)."""
    due = row.next_attempt_at
    return RowView(
        id=row.id,
        type=escape(row.type),
        key=escape(row.key) if row.key is not None else "-",
        attempts=row.attempts,
        age=_span((now - row.created_at).total_seconds()),
        next_try="now"
        if due is None or due <= now
        else "in " + _span((due - now).total_seconds() + 1),
        error=escape(row.last_error or "-"),
    )


async def _view(label: str, outbox: Any) -> OutboxView:
    from ..effects.pending import Selection, list_pending

    table = outbox.sql.table
    try:
        counts = await outbox.counts()
        rows = await list_pending(outbox, Selection(failing=True), limit=MAX_ROWS)
    except (RabbitqError, OSError) as exc:
        text = scrub(str(exc), url_password(outbox.dsn))
        return OutboxView(label, table, error=f"cannot read {redact_url(outbox.dsn)}: {text}")
    except Exception as exc:  # psycopg's own errors (a missing privilege, say): one line
        return OutboxView(
            label, table, error=f"{type(exc).__name__}: {scrub(str(exc), url_password(outbox.dsn))}"
        )
    finally:
        await outbox.close()
    now = datetime.now(UTC)
    return OutboxView(
        label,
        table,
        pending=counts.pending,
        failing=counts.failing,
        oldest=_span(counts.oldest_age) if counts.pending else "-",
        rows=tuple(row_view(r, now) for r in rows),
    )


async def outbox_page(request: Request) -> Response:
    """``/outbox``: every outbox of the console's apps."""
    state: State = request.app.state.console
    outboxes = [await _view(label, outbox) for label, outbox in state.config.outboxes]
    session = request.cookies.get(COOKIE)
    who = state.config.guard.who(session)
    context = {
        "config": state.config,
        "signed_in": who is not None,
        "who": who,
        "csrf": state.config.guard.csrf(session) if session and who else "",
        "csrf_field": CSRF_FIELD,
        "outboxes": outboxes,
        "max_rows": MAX_ROWS,
    }
    return templates.TemplateResponse(request, "outbox.html", context)
