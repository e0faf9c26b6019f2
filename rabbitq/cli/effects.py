"""``rabbitq effects init MODULE:APP`` and ``rabbitq outbox relay MODULE:APP``.

Thin, as every command: load the app, find its stores and outbox, call the library.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

import click

from .._amqp.connection import connect_once
from .._ops import logs, loop
from .._ops.endpoints import DEFAULT_BIND
from ..app import App
from ..errors import ConfigurationError, missing
from ..loader import load_app
from ..settings import TLS, redact_url, url_password
from .common import friendly_errors, json_option, print_json, tls_options, url_option

log = logging.getLogger("rabbitq.outbox")


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
@json_option
@url_option
@tls_options
@friendly_errors
def init(app_spec: str, as_json: bool, url: str | None, tls: TLS | None) -> None:
    """Create the tables of the app's PostgreSQL stores, outbox and status store, and
    check that each store answers; with an outbox, also that the broker its relay
    publishes to answers. Idempotent; the tables are also created on first use. Example:

        rabbitq effects init examples.payment_service:app
    """
    app = load_app(app_spec)
    targets = [*stores_of(app), *([app.outbox] if app.outbox is not None else [])]
    status = app.status_writer.store if app.status_writer is not None else None
    if callable(getattr(status, "open", None)):  # App(status=...): its table, or a ping
        targets.append(status)
    if not targets:
        raise ConfigurationError(f"{app_spec} has no idempotency store, outbox or status store")

    ready: list[str] = []

    def said(line: str) -> None:  # as each answers: a slow one is seen waiting
        ready.append(line)
        if not as_json:
            click.echo(f"ready: {line}")

    async def run() -> None:
        for target in targets:
            await target.open()
            await target.close()
            said(repr(target))
        if app.outbox is not None:
            broker = app.resolved_url(url)
            connection = await connect_once(broker, name="rabbitq effects init", tls=tls or app.tls)
            await connection.close()
            said(f"broker {redact_url(broker)} (for the outbox relay)")

    asyncio.run(run())
    if as_json:
        print_json({"ready": ready})


@click.group()
def outbox() -> None:
    """The transactional outbox of an app (rabbitq.effects.Outbox)."""


@outbox.command("relay")
@click.argument("app_spec", metavar="MODULE:APP")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve the relay's Prometheus metrics on /metrics on this port [default: off].",
)
@click.option(
    "--metrics-bind",
    default=DEFAULT_BIND,
    show_default=True,
    help="Address for --metrics-port (127.0.0.1 keeps it local), as for rabbitq worker.",
)
@click.option("--log-json", is_flag=True, help="Log one JSON object per line.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    help="How much to log, as for rabbitq worker.",
)
@url_option
@tls_options
@friendly_errors
def relay(
    app_spec: str,
    metrics_port: int | None,
    metrics_bind: str,
    log_json: bool,
    log_level: str,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Publish the app's pending outbox rows with confirms until SIGTERM/SIGINT.

    One relay per outbox is active at a time; others wait as standbys and take over.
    Each row's routing key needs a queue bound to it (a consumer's worker declares one):
    until then the row waits in the outbox and the relay says so. Needs the postgres
    extra. Example:

        rabbitq outbox relay examples.payment_service:app --metrics-port 9101
    """
    app = load_app(app_spec)
    if app.outbox is None:
        raise ConfigurationError(f"{app_spec} has no outbox: create one with Outbox(dsn, app=app)")
    try:  # imported here: the relay needs the postgres extra, the rest of the CLI does not
        from ..effects.metrics import OutboxMetrics
        from ..effects.relay import Relay
    except ImportError as exc:
        raise click.ClickException(missing("rabbitq outbox relay", exc)) from None
    logs.configure(
        level=log_level.upper(),
        json=log_json,
        secrets=[url_password(app.resolved_url(url)) or ""],
    )
    metrics = OutboxMetrics(app.outbox.sql.table)
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, metrics_bind, registry=metrics.registry)
    runner = Relay(app.outbox, url=url, tls=tls, observer=metrics)

    def stopping(sig: signal.Signals) -> None:
        log.info("%s received: the outbox relay stops after the current batch", sig.name)
        runner.stop()

    async def run() -> None:
        running = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            running.add_signal_handler(sig, stopping, sig)
        await runner.run()
        log.info("outbox relay stopped")

    loop.run(run())
