"""``rabbitq effects init MODULE:APP`` and ``rabbitq outbox relay MODULE:APP``.

Thin, as every command: load the app, find its stores and outbox, call the library.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import click

from ..app import App, load_app
from ..errors import ConfigurationError
from ..ops import logs, loop
from ..settings import TLS, url_password
from .common import friendly_errors, tls_options, url_option


def stores_of(app: App) -> list[Any]:
    """The app's idempotency stores (the app's and each handler's), each once (pure)."""
    found: list[Any] = []
    for store in [app.idempotency, *(h.idempotency for h in app.handlers.values())]:
        if store is not None and all(store is not s for s in found):
            found.append(store)
    return found


@click.group()
def effects() -> None:
    """Idempotency stores and outboxes of an app (rabbitq.effects)."""


@effects.command("init")
@click.argument("app_spec", metavar="MODULE:APP")
@friendly_errors
def init(app_spec: str) -> None:
    """Create the tables of the app's PostgreSQL stores, outbox and status store, and
    check that each store answers. Idempotent; the tables are also created on first use."""
    app = load_app(app_spec)
    targets = [*stores_of(app), *([app.outbox] if app.outbox is not None else [])]
    status = app.status_writer.store if app.status_writer is not None else None
    if callable(getattr(status, "open", None)):  # App(status=...): its table, or a ping
        targets.append(status)
    if not targets:
        raise ConfigurationError(f"{app_spec} has no idempotency store, outbox or status store")

    async def run() -> None:
        for target in targets:
            await target.open()
            await target.close()
            click.echo(f"ready: {target!r}")

    asyncio.run(run())


@click.group()
def outbox() -> None:
    """The transactional outbox of an app (rabbitq.effects.Outbox)."""


@outbox.command("relay")
@click.argument("app_spec", metavar="MODULE:APP")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve the relay's Prometheus metrics on this port [default: off].",
)
@click.option("--metrics-bind", default="127.0.0.1", show_default=True)
@click.option("--log-json", is_flag=True, help="Log one JSON object per line.")
@url_option
@tls_options
@friendly_errors
def relay(
    app_spec: str,
    metrics_port: int | None,
    metrics_bind: str,
    log_json: bool,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Publish the app's pending outbox rows with confirms until SIGTERM/SIGINT.

    One relay per outbox is active at a time; others wait as standbys and take over.
    """
    # Imported here: the relay needs the postgres extra, the rest of the CLI does not.
    from ..effects.metrics import OutboxMetrics
    from ..effects.relay import Relay

    app = load_app(app_spec)
    if app.outbox is None:
        raise ConfigurationError(f"{app_spec} has no outbox: create one with Outbox(dsn, app=app)")
    logs.configure(level="INFO", json=log_json, secrets=[url_password(app.resolved_url(url)) or ""])
    metrics = OutboxMetrics(app.outbox.sql.table)
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, metrics_bind, registry=metrics.registry)
    runner = Relay(app.outbox, url=url, tls=tls, observer=metrics)

    async def run() -> None:
        running = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(sig, runner.stop)
        await runner.run()

    loop.run(run())
