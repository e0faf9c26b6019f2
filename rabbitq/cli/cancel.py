"""``rabbitq cancel MODULE:APP MESSAGE_ID...``: cancel queued messages of an app made
with ``App(cancellable=True)``; one line per id (docs/control.md, "Cancel")."""

from __future__ import annotations

import asyncio

import click
import orjson

from ..app import App
from ..cancellation.cancel import close_stores, stage_of
from ..cancellation.model import CancelReport
from ..dlq.text import escape
from ..errors import ConfigurationError, RabbitqError
from ..loader import load_app
from .common import friendly_errors, json_option


async def _cancel(app: App, ids: tuple[str, ...]) -> list[CancelReport]:
    try:
        return await app.cancel(*ids)
    finally:
        await close_stores(app)


@click.command("cancel")
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("message_ids", metavar="MESSAGE_ID...", nargs=-1, required=True)
@json_option
@friendly_errors
def cancel(app_spec: str, message_ids: tuple[str, ...], as_json: bool) -> None:
    """Cancel queued messages: a pending, delayed or retrying one is acked unrun when
    it arrives (status "cancelled"); a running one sees ctx.cancelled turn true. One
    line per id says which, or that it was already handled, or unknown.

    The app must be made with App(cancellable=True, backend=...): the cancellations
    are kept in its store (about 55 days). Exit 0 once they are recorded, whatever
    each message was; 1 when the store cannot be written.

    Examples:

    \b
        rabbitq cancel shop.tasks:app 6f1c0e2a9b3d4c5e 0a9b8c7d6e5f4a3b
        rabbitq cancel shop.tasks:app 6f1c0e2a9b3d4c5e --json
    """
    app = load_app(app_spec)
    if any(not mid.strip() for mid in message_ids):
        raise click.UsageError("a MESSAGE_ID must not be empty")
    stage_of(app)  # a one-line error for an app that cannot cancel, before any I/O
    try:
        reports = asyncio.run(_cancel(app, message_ids))
    except RabbitqError:
        raise
    except Exception as exc:  # the driver's own error: one line, as any other
        raise ConfigurationError(f"cannot cancel: {type(exc).__name__}: {exc}") from exc
    if as_json:
        click.echo(orjson.dumps([r.to_json() for r in reports]).decode())
        return
    for r in reports:
        click.echo(escape(f"{r.message_id}: {r.text}"))
