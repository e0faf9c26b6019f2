"""``rabbitq purge MODULE:APP``: delete the ready messages of an app's main queue (as
``celery purge`` does); its retry queues and its DLQ are left as they are. An app with
a key store (unique and debounced publishes, docs/control.md) has its messages taken
one by one instead, so that the keys they hold are freed."""

from __future__ import annotations

import asyncio
import sys

import click
from aio_pika.abc import AbstractConnection

from .._amqp.connection import connect_once
from .._amqp.topology import QueueDepth, queue_depths
from ..errors import ConfigurationError
from ..loader import load_app
from ..settings import TLS
from ..unique.release import KeyRelease, key_release, keys_of, release_all
from .common import friendly_errors, json_option, print_json, tls_options, url_option

MAX_READ = 1_000_000  # messages taken from one queue at most (a queue that never empties)


async def _depths(connection: AbstractConnection, names: list[str]) -> list[QueueDepth]:
    depths = await queue_depths(connection, [(name, "main") for name in names])
    missing = [d.name for d in depths if not d.exists]
    if missing:
        raise ConfigurationError(
            f"queue {missing[0]!r} does not exist: nothing to purge "
            "(rabbitq worker or rabbitq topology declares it)"
        )
    return depths


async def _purge(connection: AbstractConnection, names: list[str]) -> list[tuple[str, int]]:
    """Purge each queue; ``(name, messages purged)``."""
    channel = await connection.channel(publisher_confirms=False)
    try:
        purged = []
        for name in names:
            queue = await channel.get_queue(name, ensure=True)
            ok = await queue.purge()
            purged.append((name, ok.message_count or 0))
        return purged
    finally:
        await channel.close()


async def _purge_freeing(
    connection: AbstractConnection, names: list[str], release: KeyRelease
) -> list[tuple[str, int]]:
    """Take each queue's messages one by one until it is empty, acked, then free the
    unique and debounce keys they held (once the channel's acks are in)."""
    channel = await connection.channel(publisher_confirms=False)
    purged, gone = [], []
    try:
        for name in names:
            queue, count = await channel.get_queue(name, ensure=True), 0
            while count < MAX_READ and (m := await queue.get(no_ack=False, fail=False)):
                await m.ack()
                count += 1
                if any(keys_of(m.headers or {})):
                    gone.append((dict(m.headers or {}), m.message_id or ""))
            purged.append((name, count))
    finally:
        await channel.close()
    await release_all(release, gone)
    return purged


@click.command("purge")
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Only print how many messages would be purged.")
@json_option
@url_option
@tls_options
@friendly_errors
def purge(
    app_spec: str, yes: bool, dry_run: bool, as_json: bool, url: str | None, tls: TLS | None
) -> None:
    """Delete every message waiting in the app's main queue (with partitions: in each
    partition's), after asking; print how many went. Messages a worker is handling
    now, the retry queues and the DLQ are left (rabbitq dlq purge empties a DLQ).
    Off a terminal it needs --yes.

    \b
    Examples:
      rabbitq purge myservice:app --dry-run
      rabbitq purge myservice:app --yes
    """
    app = load_app(app_spec)
    names = [name for name, kind in app.topology().depth_specs() if kind == "main"]
    if not yes and not dry_run and not sys.stdin.isatty():
        raise click.UsageError("refusing to purge without --yes when not on a terminal")
    broker, tls = app.resolved_url(url), tls or app.tls

    async def run() -> list[tuple[str, int]]:
        connection = await connect_once(broker, name="rabbitq purge", tls=tls)
        try:
            depths = await _depths(connection, names)
            if dry_run:
                return [(d.name, d.messages) for d in depths]
            if not yes:
                total = sum(d.messages for d in depths)
                where = ", ".join(names)
                question = f"Delete the {total} message(s) waiting in {where} for good?"
                if not await asyncio.to_thread(click.confirm, question, err=as_json):
                    raise click.Abort
            release = key_release(app)
            if release is not None:
                return await _purge_freeing(connection, names, release)
            return await _purge(connection, names)
        finally:
            await connection.close()

    done = asyncio.run(run())
    if as_json:
        queues = [{"queue": name, "messages": count} for name, count in done]
        print_json({"dry_run": dry_run, "queues": queues})
        return
    for name, count in done:
        if dry_run:
            click.echo(f"{name}: {count} message(s) would be purged (dry run: nothing deleted)")
        else:
            click.echo(f"{name}: {count} message(s) purged")
