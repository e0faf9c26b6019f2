"""``rabbitq cancel MODULE:APP MESSAGE_ID...``: cancel queued messages of an app made
with ``App(cancellable=True)``; one line per id (docs/control.md, "Cancel").

An id is resolved against the app's status store first, as ``rabbitq dlq show``
resolves one against the DLQ: a whole id it knows, or the one id that starts with a
prefix. An ambiguous prefix, or an id it has no record of, is refused before anything
is recorded (exit 2), unless ``--unknown-ok`` (a message not published yet, or by a
producer that keeps no status). Without a status store the ids are taken as given.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import click

from ..app import App
from ..cancellation.cancel import close_stores, stage_of
from ..cancellation.model import CancelReport
from ..dlq.text import escape
from ..errors import ConfigurationError, RabbitqError
from ..loader import load_app
from ..settings import TLS
from ..status.lookup import ids_starting_with, message_status
from .common import friendly_errors, json_option, print_json, tls_options, url_option

SHOWN = 5  # candidates an ambiguous prefix's error names


@dataclass(frozen=True)
class Found:
    """What the status store knows of one MESSAGE_ID as typed: whether a message has
    that id, and (if not) the ids that start with it (None: the store cannot search)."""

    given: str
    exact: bool
    starting: list[str] | None


def resolve(found: Found, *, unknown_ok: bool) -> str:
    """The message id to cancel for ``found`` (pure): the id itself if it is known, the
    one id that starts with it, else a UsageError (an ambiguous prefix always; an
    unknown id unless ``unknown_ok``)."""
    if found.exact:
        return found.given
    starting = found.starting or []
    if len(starting) == 1:
        return starting[0]
    if len(starting) > 1:
        shown = ", ".join(starting[:SHOWN]) + (" and more" if len(starting) > SHOWN else "")
        raise click.UsageError(f"{found.given!r} is ambiguous: ids starting with it: {shown}")
    if unknown_ok:
        return found.given
    raise click.UsageError(
        f"no message with id {found.given!r} (or starting with it) in the status store: "
        "check the id, or give --unknown-ok to cancel it if it arrives (a message not "
        "published yet, or by a producer without App(status=...))"
    )


async def _find(app: App, ids: tuple[str, ...]) -> list[Found] | None:
    """What the app's status store knows of each id; None without a status store."""
    writer = app.status_writer
    if writer is None:
        return None
    found = []
    for mid in ids:
        exact = await message_status(writer.store, mid) is not None
        starting = None if exact else await ids_starting_with(writer.store, mid, limit=SHOWN + 1)
        found.append(Found(mid, exact, starting))
    return found


async def _cancel(app: App, ids: tuple[str, ...], unknown_ok: bool) -> list[CancelReport]:
    try:
        try:
            found = await _find(app, ids)
        except Exception as exc:  # the status store cannot be read: nothing to resolve with
            if not unknown_ok:
                raise ConfigurationError(
                    f"cannot look the ids up: {exc} (--unknown-ok cancels them as given)"
                ) from exc
            found = None
        resolved = ids if found is None else [resolve(f, unknown_ok=unknown_ok) for f in found]
        return await app.cancel(*resolved)
    finally:
        await close_stores(app)


@click.command("cancel")
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("message_ids", metavar="MESSAGE_ID|PREFIX...", nargs=-1, required=True)
@click.option(
    "--unknown-ok",
    is_flag=True,
    help="Record an id the status store has no record of (a message not published yet, "
    "or by a producer without App(status=...)): cancelled if it arrives.",
)
@json_option
@url_option
@tls_options
@friendly_errors
def cancel(
    app_spec: str,
    message_ids: tuple[str, ...],
    unknown_ok: bool,
    as_json: bool,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Cancel queued messages: a pending, delayed or retrying one is acked unrun when
    it arrives (status "cancelled"); a running one sees ctx.cancelled turn true. One
    line per id says which, or that it was already handled.

    MESSAGE_ID may be the first characters of an id the status store knows, if only
    one id starts with them. An id it has no record of, or an ambiguous prefix, is
    refused (exit 2) before anything is recorded; --unknown-ok records an unknown id as
    given. Without a status store the ids are taken as given.

    The app must be made with App(cancellable=True, backend=...): the cancellations
    are kept in its store (about 55 days). Exit 0 once they are recorded, whatever
    each message was; 1 when the store cannot be written. The cancellations live in
    the app's store: --url and the TLS files are accepted, as by every command.

    Examples:

    \b
        rabbitq cancel shop.tasks:app 6f1c0e2a 0a9b8c7d
        rabbitq cancel shop.tasks:app 6f1c0e2a9b3d4c5e --json
        rabbitq cancel shop.tasks:app order-1234 --unknown-ok
    """
    app = load_app(app_spec)
    if any(not mid.strip() for mid in message_ids):
        raise click.UsageError("a MESSAGE_ID must not be empty")
    stage_of(app)  # a one-line error for an app that cannot cancel, before any I/O
    try:
        reports = asyncio.run(_cancel(app, message_ids, unknown_ok))
    except (RabbitqError, click.UsageError):
        raise
    except Exception as exc:  # the driver's own error: one line, as any other
        raise ConfigurationError(f"cannot cancel: {type(exc).__name__}: {exc}") from exc
    if as_json:
        print_json([r.to_json() for r in reports])
        return
    for r in reports:
        click.echo(escape(f"{r.message_id}: {r.text}"))
