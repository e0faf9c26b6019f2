"""The options and the plumbing every ``rabbitq dlq`` command shares: the filters,
``--limit`` and ``--json``, running one library call, and the closing tally."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click
from aio_pika.abc import AbstractConnection
from click.shell_completion import CompletionItem
from rich.console import Console

from .. import dlq as ops
from .._amqp.connection import connect_once
from ..dlq.operations import Released
from ..errors import DlqError, DlqInterrupted
from ..loader import load_app
from ..retry import DLQ_REASONS as REASONS
from ..settings import TLS, resolve_url
from ..tracing.base import Tracing
from ..unique.release import purge_releases
from . import dlq_view as view
from .common import F, attach_json, print_json
from .when import WHEN

T = TypeVar("T")


def unknown_reasons(reasons: frozenset[str]) -> list[str]:
    """The ``--reason`` values that are neither rabbitq's nor ``broker:<x-death reason>``
    (pure). Any reason is accepted (a middleware writes its own, large payloads write
    ``blob-missing``); these only earn a note when nothing matched, in case of a typo."""
    return sorted(
        r for r in reasons if r not in REASONS and not (r.startswith("broker:") and len(r) > 7)
    )


def note_unmatched(filters: ops.Filters, matched: int) -> None:
    """One line on stderr when nothing matched and a ``--reason`` is none rabbitq writes
    (``exausted``): a typo, or a reason no dead letter has (yet)."""
    if matched or not (odd := unknown_reasons(filters.reasons)):
        return
    click.echo(
        f"note: nothing matched, and rabbitq writes no reason {', '.join(map(repr, odd))} "
        f"(its reasons: {', '.join(REASONS)}, broker:<x-death reason>; a middleware may "
        "write others)",
        err=True,
    )


# x-death reasons RabbitMQ writes, offered after "broker:" (any other is accepted too)
BROKER_REASONS = ("broker:delivery_limit", "broker:expired", "broker:maxlen", "broker:rejected")


def complete_reasons(
    _ctx: click.Context, _param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Shell completion of ``--reason``: rabbitq's reasons and the broker's x-death
    reasons that start with what was typed (free text stays allowed)."""
    known = (*REASONS, *BROKER_REASONS)
    return [CompletionItem(r) for r in known if r.startswith(incomplete)]


def filter_options(fn: F) -> F:
    """The filters every command shares; each is ANDed, a repeated option is ORed."""
    options = [
        click.option(
            "--type", "types", multiple=True, metavar="TYPE", help="Message type (repeatable)."
        ),
        click.option(
            "--reason",
            "reasons",
            multiple=True,
            metavar="REASON",
            shell_complete=complete_reasons,
            help=f"{', '.join(REASONS)}, broker:<x-death reason> such as "
            "broker:delivery_limit, or any reason a dead letter has (repeatable).",
        ),
        click.option(
            "--message-id", "message_ids", multiple=True, metavar="ID", help="(repeatable)"
        ),
        click.option(
            "--since",
            type=WHEN,
            help="Failed at or after: ISO 8601 (2024-05-01T10:00Z) or an age (30m, 2h, 3d).",
        ),
        click.option("--until", type=WHEN, help="Failed before (same forms as --since)."),
        click.option(
            "--grep", metavar="REGEX", help="Error text (rabbitq-error) matches this regex."
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def filters_from(kwargs: dict[str, Any]) -> ops.Filters:
    return ops.Filters.build(
        types=kwargs.pop("types"),
        reasons=kwargs.pop("reasons"),
        message_ids=kwargs.pop("message_ids"),
        since=kwargs.pop("since"),
        until=kwargs.pop("until"),
        grep=kwargs.pop("grep"),
    )


def limit_option(
    default: int | None = None, help: str = "Stop after N messages."
) -> Callable[[F], F]:
    return click.option(
        "--limit",
        type=click.IntRange(min=0),
        default=default,
        show_default=default is not None,
        help=help,
    )


def app_option(help: str) -> Callable[[F], F]:
    """``--app MODULE:APP`` (as ``app_spec``): whose tracing or status to record with."""
    return click.option("--app", "app_spec", metavar="MODULE:APP", help=help)


unblock_option = click.option(
    "--unblock",
    is_flag=True,
    help=(
        "Let each replayed message lift its key's block (handlers with ordered_by and "
        'on_dead="block") even if it is not the message that blocked it: an explicit '
        "operator action, e.g. after purging that message. Without it, only the "
        "message that blocked a key unblocks it; the others go back to the DLQ as "
        "'blocked', behind it and in order."
    ),
)


def run_call(
    url: str | None,
    tls: TLS | None,
    call: Callable[[AbstractConnection | None], Coroutine[Any, Any, T]],
) -> T:
    """Run one library call; with --tls-* files, on a connection opened with them (else
    the library connects, with the ``$RABBITQ_TLS_*`` files if any)."""

    async def go() -> T:
        if tls is None:
            return await call(None)
        connection = await connect_once(resolve_url(url), name="rabbitq dlq", tls=tls)
        try:
            return await call(connection)
        finally:
            await connection.close()

    return asyncio.run(go())


def plain_console() -> Console:
    """A console that colours nothing by itself (no highlighting of untrusted text); off
    a terminal (a file, a pipe) lines are not cut to 80 columns, unless $COLUMNS says."""
    console = Console(highlight=False)
    wide = not console.is_terminal and "COLUMNS" not in os.environ
    return Console(highlight=False, width=view.WIDE) if wide else console


def finish(tally: ops.Tally, as_json: bool, **more: Any) -> None:
    """The closing tally: one line of text, or under ``--json`` the command's one
    document (the tally's fields, and ``more``)."""
    if as_json:
        print_json({**tally.as_dict(), **more})
    else:
        click.echo(view.tally_text(tally))


def report_interruption(fn: F) -> F:
    """Print what an interrupted operation did before its one-line error (under
    ``--json``: in the error's document, as ``tally``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DlqInterrupted as exc:
            if isinstance(exc.summary, ops.Tally):
                if kwargs.get("as_json"):
                    attach_json(exc, tally=exc.summary.as_dict())
                else:
                    finish(exc.summary, False)
            raise

    return wrapper  # type: ignore[return-value]


def app_seams(app_spec: str | None) -> tuple[Tracing | None, list[Released]]:
    """What ``--app MODULE:APP`` gives a purge: the app's tracing (its status records)
    and what it releases with the messages deleted (their large payloads' blobs, the
    unique and debounce keys they held: docs/payloads.md, docs/control.md)."""
    app = load_app(app_spec) if app_spec else None
    if app is None:
        return None, []
    return app.tracing, purge_releases(app)


def _cipher_of_app(_ctx: click.Context, _param: click.Parameter, spec: str | None) -> Any:
    """``--app MODULE:APP``: that app's cipher (None: not given, or not encrypted)."""
    if spec is None:
        return None
    from ..crypto.codec import cipher_of

    return cipher_of(load_app(spec))


key_option = click.option(
    "--app",
    "cipher",
    metavar="MODULE:APP",
    callback=_cipher_of_app,
    help="Decrypt with this app's key ring (App(encryption=...)); without it an encrypted "
    "body or error shows as 'encrypted (key K)'.",
)
"""``show``'s ``--app``: read an encrypted app's messages in clear (docs/privacy.md)."""


def by_id_or_prefix(
    messages: list[ops.DeadMessage], wanted: str, queue: str
) -> list[ops.DeadMessage]:
    """The messages whose id is ``wanted``, else those whose id starts with it if they
    all share one id; an error that names the candidates if they do not (pure)."""
    exact = [m for m in messages if m.message_id == wanted]
    if exact:
        return exact
    matching = [m for m in messages if wanted and (m.message_id or "").startswith(wanted)]
    ids = sorted({m.message_id or "" for m in matching})
    if not ids:
        raise DlqError(
            f"no message with message_id {wanted!r} (or starting with it) in "
            f"{ops.resolve_dlq(queue)!r} (see 'rabbitq dlq list {queue}')"
        )
    if len(ids) > 1:
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        raise DlqError(f"{wanted!r} is ambiguous: {len(ids)} message ids start with it: {shown}")
    return matching
