"""``rabbitq status MODULE:APP ID``: what happened to one message, or a workflow group's
progress (docs/status.md)."""

from __future__ import annotations

import asyncio

import click

from ..app import App
from ..crypto.codec import cipher_of, shown_text
from ..crypto.view import reveal_tree
from ..dlq.text import escape
from ..errors import ConfigurationError, RabbitqError
from ..loader import load_app
from ..settings import TLS
from ..status.group import GroupStatus, group_lines
from ..status.model import MessageStatus, history_lines
from .common import friendly_errors, json_option, print_json, tls_options, url_option


async def _read(app: App, message_id: str) -> MessageStatus | GroupStatus | None:
    assert app.status_writer is not None
    try:
        return await app.status(message_id)
    finally:
        await app.status_writer.store.close()


@click.command("status")
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("message_id", metavar="MESSAGE_ID|GROUP_ID")
@json_option
@url_option
@tls_options
@friendly_errors
def status(app_spec: str, message_id: str, as_json: bool, url: str | None, tls: TLS | None) -> None:
    """Show what happened to a message: its state, attempts and history, from the
    app's status store (App(status=...)). Given a workflow's group id: its members
    by state, its callback's state, and the members that have not succeeded first.

    Examples:

    \b
        rabbitq status myservice:app 6f1c0e2a9b3d4c5e8f7a6b5c4d3e2f1a
        rabbitq status myservice:app 6f1c0e2a9b3d4c5e8f7a6b5c4d3e2f1a --json
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
            f"no status for message or group {message_id!r} in {app.status_writer.store!r} "
            "(unknown, or older than the store's retention)"
        )
    cipher = cipher_of(app)  # an encrypted app's errors: decrypted (docs/privacy.md)
    if as_json:
        print_json(reveal_tree(found.to_json(), message_id, cipher))
        return
    if isinstance(found, GroupStatus):
        lines = group_lines(found)
    else:
        lines = [shown_text(line, message_id, cipher) for line in history_lines(found)]
    # ids and errors come from producers: their control characters written as escapes
    click.echo("\n".join(escape(line) for line in lines))
