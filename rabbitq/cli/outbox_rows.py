"""``rabbitq outbox list / retry / discard MODULE:APP``: see and act on pending rows.

Thin: load the app, find its outbox, call :mod:`rabbitq.effects.pending`, print.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import ConfigurationError, missing
from ..loader import load_app
from ..settings import TLS
from .common import F, friendly_errors, json_option, print_json, tls_options, url_option

if TYPE_CHECKING:
    from ..effects.outbox import Outbox
    from ..effects.pending import PendingRow, Selection

T = TypeVar("T")


def _selection_options(fn: F) -> F:
    options = [
        click.option("--id", "ids", type=int, multiple=True, help="This row (repeatable)."),
        click.option("--type", "type_", metavar="TYPE", help="Rows of this message type."),
        click.option("--failing", is_flag=True, help="Rows that failed at least once."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _pending(command: str) -> ModuleType:
    """:mod:`rabbitq.effects.pending`, or one line that names the missing extra."""
    try:
        return importlib.import_module("rabbitq.effects.pending")
    except ImportError as exc:
        raise click.ClickException(missing(f"rabbitq outbox {command}", exc)) from None


def _selection(
    pending: ModuleType, ids: tuple[int, ...], type_: str | None, failing: bool, everything: bool
) -> Selection:
    selection: Selection = pending.Selection(
        ids=ids, type=type_, failing=failing, everything=everything
    )
    return selection


def _with_outbox(app_spec: str, action: Callable[[Outbox], Coroutine[Any, Any, T]]) -> T:
    app = load_app(app_spec)
    if app.outbox is None:
        raise ConfigurationError(f"{app_spec} has no outbox: create one with Outbox(dsn, app=app)")
    outbox = app.outbox

    async def run() -> T:
        try:
            return await action(outbox)
        finally:
            await outbox.close()

    return asyncio.run(run())


def _ago(when: datetime, now: datetime) -> str:
    seconds = max(0, int((now - when).total_seconds()))
    return _span(seconds)


def _span(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _next_try(row: PendingRow, now: datetime) -> str:
    if row.next_attempt_at is None or row.next_attempt_at <= now:
        return "now"
    return "in " + _span(int((row.next_attempt_at - now).total_seconds()) + 1)


def render(rows: list[PendingRow], now: datetime) -> list[str]:
    """The listing as lines: a header, then one line per row (pure)."""
    table = [("ID", "TYPE", "KEY", "TRIES", "AGE", "NEXT TRY", "LAST ERROR")]
    for r in rows:
        table.append(
            (
                str(r.id),
                r.type,
                r.key or "-",
                str(r.attempts),
                _ago(r.created_at, now),
                _next_try(r, now),
                " ".join((r.last_error or "-").split()),
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(6)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[6]])
        for line in table
    ]


@click.command("list")
@click.argument("app_spec", metavar="MODULE:APP")
@_selection_options
@click.option("--limit", type=click.IntRange(0), default=100, show_default=True, help="0: all.")
@json_option
@url_option
@tls_options
@friendly_errors
def list_rows(
    app_spec: str,
    ids: tuple[int, ...],
    type_: str | None,
    failing: bool,
    limit: int,
    as_json: bool,
    url: str | None,
    tls: TLS | None,
) -> None:
    """List the outbox's pending rows, oldest first: id, type, key, tries, age, when the
    relay tries it next, and its last error (a failing row waits in its own backoff and
    holds back only the later rows of its key).

    \b
    Examples:
      rabbitq outbox list myservice:app --failing
      rabbitq outbox list myservice:app --type payment.captured --json
    """
    pending = _pending("list")
    selection = _selection(pending, ids, type_, failing, everything=True)
    rows = _with_outbox(app_spec, lambda o: pending.list_pending(o, selection, limit=limit))
    now = datetime.now(UTC)
    if as_json:
        print_json(
            [
                {
                    "id": r.id,
                    "type": r.type,
                    "key": r.key,
                    "message_id": r.message_id,
                    "attempts": r.attempts,
                    "created_at": r.created_at,
                    "next_attempt_at": r.next_attempt_at,
                    "last_error": r.last_error,
                }
                for r in rows
            ]
        )
        return
    if not rows:
        click.echo("no pending rows" + (" match" if selection.narrowed else ""))
        return
    for line in render(rows, now):
        click.echo(line)


@click.command("retry")
@click.argument("app_spec", metavar="MODULE:APP")
@_selection_options
@click.option("--all", "everything", is_flag=True, help="Every pending row.")
@json_option
@url_option
@tls_options
@friendly_errors
def retry_rows(
    app_spec: str,
    ids: tuple[int, ...],
    type_: str | None,
    failing: bool,
    everything: bool,
    as_json: bool,
    url: str | None,
    tls: TLS | None,
) -> None:
    """End the backoff of pending rows: the running relay tries them at once (after you
    bound a queue to their type, say). Their order per key is kept.

    \b
    Examples:
      rabbitq outbox retry myservice:app --failing
      rabbitq outbox retry myservice:app --id 1041 --id 1042
    """
    pending = _pending("retry")
    selection = _selection(pending, ids, type_, failing, everything)
    count = _with_outbox(app_spec, lambda o: pending.retry(o, selection))
    if as_json:
        print_json({"retried": count})
        return
    click.echo(f"{count} row(s) will be tried at once by the relay")


@click.command("discard")
@click.argument("app_spec", metavar="MODULE:APP")
@_selection_options
@click.option("--all", "everything", is_flag=True, help="Every pending row.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@url_option
@tls_options
@friendly_errors
def discard_rows(
    app_spec: str,
    ids: tuple[int, ...],
    type_: str | None,
    failing: bool,
    everything: bool,
    yes: bool,
    as_json: bool,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Delete pending rows that must never be sent; the later rows of their keys then go.
    Each deleted row is printed (id, type, message_id). Rows already sent are kept.

    \b
    Examples:
      rabbitq outbox discard myservice:app --type legacy.event --yes
      rabbitq outbox discard myservice:app --id 1041
    """
    pending = _pending("discard")
    selection = _selection(pending, ids, type_, failing, everything)
    selection.check_acting("discard")
    if not yes:
        if not sys.stdin.isatty():
            raise click.ClickException(
                "refusing to discard rows without --yes when not on a terminal"
            )
        click.confirm("Delete the selected pending rows for good?", abort=True, err=as_json)
    gone = _with_outbox(app_spec, lambda o: pending.discard(o, selection))
    if as_json:
        print_json(
            {"discarded": [{"id": i, "type": t, "message_id": m} for i, t, m in gone]}
        )
        return
    for row_id, type_name, message_id in gone:
        click.echo(f"discarded row {row_id} ({type_name}) message_id {message_id}")
    click.echo(f"{len(gone)} row(s) discarded")
