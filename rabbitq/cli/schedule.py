"""``rabbitq scheduler`` (run an app's schedules alone) and ``rabbitq schedule list``."""

from __future__ import annotations

import asyncio
import signal
from datetime import datetime
from typing import Any

import click
import orjson
from rich.console import Console
from rich.table import Table

from .._ops import logs
from .._ops.endpoints import DEFAULT_BIND
from ..loader import load_app
from ..schedule import listing
from ..schedule.metrics import ScheduleMetrics
from ..schedule.runner import Scheduler
from ..settings import TLS, url_password
from .common import friendly_errors, json_option, tls_options, url_option


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve the schedule metrics on /metrics at this port [default: off].",
)
@click.option("--metrics-bind", default=DEFAULT_BIND, show_default=True, help="Address for it.")
@click.option("--log-json", is_flag=True, help="Log one JSON object per line.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    help="debug adds one line per tick published.",
)
@url_option
@tls_options
@friendly_errors
def scheduler(
    app_spec: str,
    metrics_port: int | None,
    metrics_bind: str,
    log_json: bool,
    log_level: str,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Run the app's schedules (and nothing else) until SIGTERM/SIGINT.

    Workers run them too unless started with --no-schedules; however many processes
    run them, one holds the lease on the broker and publishes each tick once.

    \b
    Example:
      rabbitq scheduler myservice:app --metrics-port 9101
    """
    app = load_app(app_spec)
    if not app.schedules:
        raise click.ClickException(f"{app_spec} has no schedules (@app.schedule)")
    logs.configure(
        level=log_level, json=log_json, secrets=[url_password(app.resolved_url(url)) or ""]
    )
    metrics = ScheduleMetrics()
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr=metrics_bind, registry=metrics.registry)
    asyncio.run(_run(Scheduler(app, url=url, tls=tls, metrics=metrics)))


async def _run(runner: Scheduler) -> None:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await runner.run()
    except asyncio.CancelledError:
        return  # a signal: the lease goes with the connection


@click.group()
def schedule() -> None:
    """Look at an app's periodic schedules (@app.schedule)."""


def _time(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


@schedule.command("list")
@click.argument("app_spec", metavar="MODULE:APP")
@json_option
@url_option
@tls_options
@friendly_errors
def list_schedules(app_spec: str, as_json: bool, url: str | None, tls: TLS | None) -> None:
    """Show each schedule's last tick and next fire time, and who leads.

    The last tick is read from the broker's progress record without taking it.

    \b
    Example:
      rabbitq schedule list myservice:app --json
    """
    app = load_app(app_spec)
    found = asyncio.run(listing.read(app, url=url, tls=tls))
    rows: list[dict[str, Any]] = [
        {
            "name": r.name,
            "when": r.when,
            "catch_up": r.catch_up,
            "last_tick": _time(r.last),
            "next_tick": _time(r.next),
        }
        for r in found.rows
    ]
    if as_json:
        leader = {"leading": found.leading, "leader": found.leader, "written": _time(found.written)}
        click.echo(orjson.dumps({"schedules": rows, **leader}, option=orjson.OPT_INDENT_2))
        return
    table = Table("schedule", "when", "catch up", "last tick", "next tick")
    for row in rows:
        table.add_row(
            row["name"], row["when"], row["catch_up"], row["last_tick"] or "-", row["next_tick"]
        )
    console = Console()
    console.print(table)
    if found.leading:
        console.print(f"led now; last record by {found.leader or '?'} at {_time(found.written)}")
    else:
        console.print("no scheduler leads now (no worker or rabbitq scheduler is running them)")
