"""``rabbitq status MODULE:APP MESSAGE_ID``: what happened to one message (docs/status.md)."""

from __future__ import annotations

import asyncio

import click
import orjson

from ..app import App, load_app
from ..errors import ConfigurationError, RabbitqError
from ..status.model import MessageStatus, history_lines
from .common import friendly_errors, json_option


async def _read(app: App, message_id: str) -> MessageStatus | None:
    assert app.status_writer is not None
    try:
        return await app.status(message_id)
    finally:
        await app.status_writer.store.close()


@click.command("status")
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("message_id")
@json_option
@friendly_errors
def status(app_spec: str, message_id: str, as_json: bool) -> None:
    """Show what happened to a message: its state, attempts and history, from the
    app's status store (App(status=...)).

    Example: rabbitq status myservice:app 6f1c0e2a9b3d4c5e8f7a6b5c4d3e2f1a --json
    """
    app = load_app(app_spec)
    if app.status_writer is None:
        raise ConfigurationError(f"{app_spec} has no status store: App(status=...)")
    try:
        found = asyncio.run(_read(app, message_id))
    except RabbitqError:
        raise
    except Exception as exc:  # the driver's own error: one line, as any other
        raise ConfigurationError(
            f"cannot read {app.status_writer.store!r}: {type(exc).__name__}: {exc}"
        ) from exc
    if found is None:
        raise click.ClickException(
            f"no status for message {message_id!r} in {app.status_writer.store!r} "
            "(unknown, or older than the store's retention)"
        )
    if as_json:
        click.echo(orjson.dumps(found.to_json()).decode())
    else:
        click.echo("\n".join(history_lines(found)))
