"""``rabbitq blobs sweep MODULE:APP``: delete what the app's large-payload store keeps
for nothing (docs/payloads.md): uploads whose publish never completed (orphans, past
their ``orphan_after``) and expired tombstones of handled blobs."""

from __future__ import annotations

import asyncio

import click

from ..errors import ConfigurationError
from ..loader import load_app
from ..payloads.store import BlobStore, Swept
from ..settings import TLS
from .common import friendly_errors, json_option, print_json, tls_options, url_option


async def _sweep(store: BlobStore) -> Swept:
    try:
        return await store.sweep()
    finally:
        await store.close()


@click.group("blobs")
def blobs() -> None:
    """The app's large-payload store (App(large_payloads=...))."""


@blobs.command("sweep")
@click.argument("app_spec", metavar="MODULE:APP")
@json_option
@url_option
@tls_options
@friendly_errors
def sweep(app_spec: str, as_json: bool, url: str | None, tls: TLS | None) -> None:
    """Delete orphaned uploads (a publisher that died between upload and confirm, past
    the store's orphan_after) and expired tombstones of handled payloads; print how
    many. Blobs whose messages still wait (a queue, a delay, a retry, the DLQ) stay.
    Safe to run from cron on any host, as often as you like. It reads only the store:
    --url and the TLS files are accepted, as by every command, and not used.

    \b
    Example:
      rabbitq blobs sweep myservice:app
    """
    app = load_app(app_spec)
    if app.large_payloads is None:
        raise ConfigurationError(f"{app_spec} has no large-payload store: App(large_payloads=...)")
    swept = asyncio.run(_sweep(app.large_payloads))
    if as_json:
        print_json({"orphans": swept.orphans, "tombstones": swept.tombstones})
    else:
        click.echo(f"deleted {swept.orphans} orphaned upload(s), {swept.tombstones} tombstone(s)")
