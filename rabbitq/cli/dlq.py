"""``rabbitq dlq``: list, show, replay, export, import and purge dead messages.

The commands parse options (:mod:`rabbitq.cli.dlq_options`) and call :mod:`rabbitq.dlq`;
:mod:`rabbitq.cli.dlq_view` draws.
QUEUE is a service's queue (its DLQ, ``QUEUE.dlq``, is used) or a DLQ's own name.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .. import dlq as ops
from ..crypto.view import reveal
from ..settings import TLS
from . import dlq_view as view
from .common import Reported, friendly_errors, json_option, print_json, tls_options, url_option
from .dlq_options import (
    app_option,
    app_seams,
    by_id_or_prefix,
    filter_options,
    filters_from,
    finish,
    key_option,
    limit_option,
    note_unmatched,
    plain_console,
    report_interruption,
    run_call,
    unblock_option,
)


def _interactive() -> bool:
    """Whether a person can answer a question (stdin is a terminal)."""
    return sys.stdin.isatty()


@click.group()
def dlq() -> None:
    """Inspect, replay, export, import and purge dead-lettered messages.

    QUEUE is the service's queue (emails: its DLQ emails.dlq is used) or the DLQ's own
    name. Reading (list, show, export) leaves the DLQ as it was; a message leaves the
    DLQ only after its copy is confirmed by the broker or fsynced to the export file.
    """


@dlq.command("list")
@click.argument("queue")
@filter_options
@limit_option(100, "Show at most N messages; 0 shows all.")
@json_option
@url_option
@tls_options
@friendly_errors
def list_(
    queue: str, limit: int, as_json: bool, url: str | None, tls: TLS | None, **kwargs: Any
) -> None:
    """List dead messages, oldest first: id, type, reason, attempts, when, error.

    Examples:

    \b
        rabbitq dlq list emails --reason exhausted --since 2h
        rabbitq dlq list emails.dlq --type email.send --json
    """
    filters = filters_from(kwargs)
    found = run_call(
        url,
        tls,
        lambda c: ops.list_messages(
            queue, url=url, filters=filters, limit=limit or None, connection=c
        ),
    )
    note_unmatched(filters, len(found))
    if as_json:
        print_json([m.summary() for m in found])
        return
    dlq_queue = ops.resolve_dlq(queue)
    what = f" matching {filters.describe()}" if filters.active else ""
    more = f" (the first {limit}: --limit 0 shows all)" if limit and len(found) >= limit else ""
    console = plain_console()
    title = f"{dlq_queue}: {len(found)} message(s){what}{more}"
    console.print(view.message_table(found, title, width=console.width))


@dlq.command()
@click.argument("queue")
@click.argument("message_id", metavar="MESSAGE_ID|PREFIX")
@key_option
@json_option
@url_option
@tls_options
@friendly_errors
def show(queue: str, message_id: str, cipher: Any, as_json: bool, url: str | None,
         tls: TLS | None) -> None:  # fmt: skip
    """Show one dead message: properties, headers, body and traceback.

    MESSAGE_ID may be the first characters of the id, if only one message's id starts
    with them. Control characters in the message are shown escaped (\\x1b, \\r), never
    sent to the terminal. The DLQ is left as it was. Examples:

    \b
        rabbitq dlq show emails 6f1c0e2a --json
        rabbitq dlq show payments 6f1c0e2a --app myservice:app   # decrypted
    """
    everything = run_call(url, tls, lambda c: ops.list_messages(queue, url=url, connection=c))
    found = [reveal(m, cipher) for m in by_id_or_prefix(everything, message_id, queue)]
    if as_json:  # a list: the DLQ may hold several copies of one message_id
        print_json([view.detail_json(m) for m in found])
        return
    console = plain_console()
    for m in found:
        console.print(view.message_detail(m))
    if len(found) > 1:
        console.print(f"{len(found)} messages in the DLQ have this message_id.")


@dlq.command()
@click.argument("queue")
@filter_options
@limit_option()
@click.option("--to", metavar="QUEUE", help="Send to this queue instead of rabbitq-queue.")
@click.option("--dry-run", is_flag=True, help="Show what would move; move nothing.")
@unblock_option
@click.option(
    "--rate", type=click.FloatRange(min=0, min_open=True), help="At most N messages per second."
)
@app_option("Trace each replay with this app's tracing and status (App(tracing=, status=)).")
@json_option
@url_option
@tls_options
@friendly_errors
@report_interruption
def replay(
    queue: str,
    limit: int | None,
    to: str | None,
    dry_run: bool,
    unblock: bool,
    rate: float | None,
    app_spec: str | None,
    as_json: bool,
    url: str | None,
    tls: TLS | None,
    **kwargs: Any,
) -> None:
    """Move dead messages back to the queue they failed in.

    Each copy goes through the default exchange to that queue only, with
    rabbitq-attempt reset and rabbitq-replayed incremented; its original leaves the DLQ
    only after the broker confirmed the copy. Messages that do not match, or whose
    queue does not exist, stay in the DLQ. If the connection drops, run the command
    again: nothing is lost, and it reports how many messages may be replayed twice.

    Examples:

    \b
        rabbitq dlq replay emails --type email.send --since 1h --dry-run
        rabbitq dlq replay emails --type email.send --since 1h --rate 50
        rabbitq dlq replay ledger --message-id 6f1c0e2a --unblock
    """
    filters = filters_from(kwargs)
    tracing, *_ = app_seams(app_spec)
    label = f"replay {ops.resolve_dlq(queue)}"
    with view.ProgressView(label, enabled=not dry_run, plain=not as_json) as progress:
        tally = run_call(
            url,
            tls,
            lambda c: ops.replay(
                queue,
                url=url,
                connection=c,
                filters=filters,
                limit=limit,
                to=to,
                dry_run=dry_run,
                rate=rate,
                on_progress=progress,
                tracing=tracing,
                unblock=unblock,
            ),
        )
    note_unmatched(filters, tally.done)
    more: dict[str, Any] = {}
    if dry_run and as_json:
        more["matched"] = [{**m.summary(), "to": to or m.origin} for m in tally.matched]
    elif dry_run:
        console = plain_console()
        console.print(
            view.message_table(tally.matched, "would move (dry run)", width=console.width)
        )
    finish(tally, as_json, **more)
    if tally.failed:  # the tally above is the result (under --json, its document)
        raise Reported(
            f"{tally.failed} message(s) could not be replayed and are still in the DLQ"
        )


@dlq.command()
@click.argument("queue")
@click.argument("file", type=click.Path(dir_okay=False, writable=True))
@filter_options
@limit_option()
@click.option(
    "--delete",
    is_flag=True,
    help="Remove each exported message from the DLQ, once the file holding it is on disk.",
)
@json_option
@url_option
@tls_options
@friendly_errors
@report_interruption
def export(
    queue: str,
    file: str,
    limit: int | None,
    delete: bool,
    as_json: bool,
    url: str | None,
    tls: TLS | None,
    **kwargs: Any,
) -> None:
    """Copy dead messages to a new JSONL file, losslessly (body, properties, headers).

    The DLQ is left as it was, unless --delete. FILE must not exist yet.

    Examples:

    \b
        rabbitq dlq export emails emails-dlq.jsonl --reason invalid
    """
    filters = filters_from(kwargs)
    with view.ProgressView(f"export {ops.resolve_dlq(queue)}", plain=not as_json) as progress:
        tally = run_call(
            url,
            tls,
            lambda c: ops.export(
                queue,
                file,
                url=url,
                connection=c,
                filters=filters,
                limit=limit,
                delete=delete,
                on_progress=progress,
            ),
        )
    note_unmatched(filters, tally.done)
    finish(tally, as_json)


@dlq.command("import")
@click.argument("queue")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, readable=True))
@click.option(
    "--replay",
    "as_replay",
    is_flag=True,
    help="Put the messages back into the queue they failed in, as replay does.",
)
@click.option("--to", metavar="QUEUE", help="With --replay: send to this queue instead.")
@json_option
@url_option
@tls_options
@friendly_errors
def import_(
    queue: str,
    file: str,
    as_replay: bool,
    to: str | None,
    as_json: bool,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Publish the messages of an export FILE back into the DLQ of QUEUE.

    The whole file is checked first: a malformed line, or one that 'rabbitq dlq export'
    did not write, stops the import before anything is published. Examples:

    \b
        rabbitq dlq import emails emails-dlq.jsonl
        rabbitq dlq import emails emails-dlq.jsonl --replay
    """
    if to and not as_replay:
        raise click.UsageError("--to needs --replay")
    with view.ProgressView(f"import {ops.resolve_dlq(queue)}", plain=not as_json) as progress:
        tally = run_call(
            url,
            tls,
            lambda c: ops.import_messages(
                queue, file, url=url, replay=as_replay, to=to, on_progress=progress, connection=c
            ),
        )
    finish(tally, as_json)


@dlq.command()
@click.argument("queue")
@filter_options
@limit_option()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (needed without a TTY).")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@app_option("Record deletions in its status store, delete their large payloads, free keys.")
@json_option
@url_option
@tls_options
@friendly_errors
@report_interruption
def purge(
    queue: str,
    limit: int | None,
    yes: bool,
    dry_run: bool,
    app_spec: str | None,
    as_json: bool,
    url: str | None,
    tls: TLS | None,
    **kwargs: Any,
) -> None:
    """Delete dead messages for good: all of them, or only those the filters select.
    Asks first on a terminal; without one, --yes is required.

    Examples:

    \b
        rabbitq dlq purge emails --reason invalid --until 7d --dry-run
        rabbitq dlq purge emails --reason invalid --until 7d --yes
    """
    filters = filters_from(kwargs)
    tracing, released = app_seams(app_spec)  # docs/dlq.md, docs/control.md
    dlq_queue = ops.resolve_dlq(queue)
    what = f"matching {filters.describe()}" if filters.active else "(no filter: ALL of them)"
    if not yes and not dry_run:
        if not _interactive():
            raise click.UsageError(  # the command line lacks --yes: exit 2
                f"refusing to purge {dlq_queue} without --yes when not on a terminal"
            )
        preview = run_call(
            url,
            tls,
            lambda c: ops.purge(
                queue, url=url, filters=filters, limit=limit, dry_run=True, connection=c
            ),
        )
        if not preview.done:
            note_unmatched(filters, 0)
            if as_json:
                finish(preview, True)
            else:
                click.echo(f"nothing to delete in {dlq_queue} {what}")
            return
        keep = f"; the other {preview.skipped} stay" if preview.skipped else ""
        click.confirm(
            f"Delete {preview.done} message(s) {what} from {dlq_queue}{keep}?",
            abort=True,
            err=as_json,  # stdout holds the JSON document only
        )
        # Only those counted: a message arriving meanwhile is behind them in the queue.
        limit = preview.done
    with view.ProgressView(
        f"purge {dlq_queue}", enabled=not dry_run, plain=not as_json
    ) as progress:
        tally = run_call(
            url,
            tls,
            lambda c: ops.purge(
                queue,
                url=url,
                connection=c,
                filters=filters,
                limit=limit,
                dry_run=dry_run,
                on_progress=progress,
                tracing=tracing, released=released,
            ),
        )
    note_unmatched(filters, tally.done)
    if not as_json and filters.active:
        click.echo(f"only messages {what} were considered")
    finish(tally, as_json)
