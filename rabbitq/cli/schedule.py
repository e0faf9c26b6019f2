"""``rabbitq scheduler`` (run an app's schedules alone) and ``rabbitq schedule list``,
``pause`` and ``resume``."""

from __future__ import annotations

import asyncio
import signal
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .._ops import logs
from .._ops.endpoints import DEFAULT_BIND
from ..errors import ConfigurationError
from ..loader import load_app
from ..schedule import listing, pause
from ..schedule.metrics import ScheduleMetrics
from ..schedule.runner import Scheduler
from ..settings import TLS, url_password
from .common import friendly_errors, json_option, print_json, tls_options, url_option


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
    """Look at, pause and resume an app's periodic schedules (@app.schedule)."""


def _time(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def _short(at: datetime | None) -> str | None:
    """A tick for the table: ISO 8601 in UTC to the second (``2026-11-30T08:00:00Z``)."""
    return None if at is None else at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
            "paused": r.paused is not None,
            "paused_since": None if r.paused is None else _time(r.paused.since),
        }
        for r in found.rows
    ]
    if as_json:
        leader = {"leading": found.leading, "leader": found.leader, "written": _time(found.written)}
        print_json({"schedules": rows, **leader})
        return
    # 80 columns hold it: the next tick is never cut (it is what one looks for), the
    # schedule's "when" wraps first, then the last tick and the name fold.
    table = Table()
    table.add_column("schedule", overflow="fold")
    table.add_column("when", ratio=1)
    table.add_column("catch up", no_wrap=True)
    table.add_column("last tick", overflow="fold")
    table.add_column("next tick", no_wrap=True, min_width=20)
    for r in found.rows:
        upcoming = _short(r.next) if r.paused is None else "paused"
        table.add_row(r.name, r.when, r.catch_up, _short(r.last) or "-", upcoming)
    console = Console()
    console.print(table)
    if found.leading:
        console.print(f"led now; last record by {found.leader or '?'} at {_time(found.written)}")
    else:
        console.print("no scheduler leads now (no worker or rabbitq scheduler is running them)")


@schedule.command("pause")
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("name")
@json_option
@url_option
@tls_options
@friendly_errors
def pause_schedule(
    app_spec: str, name: str, as_json: bool, url: str | None, tls: TLS | None
) -> None:
    """Pause schedule NAME: no tick of it is published until it is resumed.

    Ticks that fall while it is paused are skipped, not caught up on resume. The
    pause is kept on the broker (a queue beside the schedules' progress record), so
    it holds across restarts and whichever process leads.

    \b
    Example:
      rabbitq schedule pause myservice:app nightly_report
    """
    app = load_app(app_spec)
    try:
        pause.check_name(app, name)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    earlier = asyncio.run(pause.pause(app, name, url=url, tls=tls))
    if as_json:  # changed: false when it was already paused
        since = None if earlier is None else _time(earlier.since)
        print_json({"schedule": name, "paused": True, "changed": earlier is None, "since": since})
        return
    if earlier is not None:
        click.echo(f"schedule {name} was already paused (since {_time(earlier.since)})")
        return
    click.echo(
        f"schedule {name} paused: no tick is published until "
        f"'rabbitq schedule resume {app_spec} {name}'; ticks meanwhile are skipped"
    )


@schedule.command("resume")
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("name")
@json_option
@url_option
@tls_options
@friendly_errors
def resume_schedule(
    app_spec: str, name: str, as_json: bool, url: str | None, tls: TLS | None
) -> None:
    """Resume schedule NAME: its next tick is published when due (the ticks that fell
    while it was paused are not caught up).

    \b
    Example:
      rabbitq schedule resume myservice:app nightly_report
    """
    app = load_app(app_spec)
    try:
        pause.check_name(app, name)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    resumed = asyncio.run(pause.resume(app, name, url=url, tls=tls))
    if as_json:  # changed: false when it was not paused
        print_json({"schedule": name, "paused": False, "changed": bool(resumed)})
    elif resumed:
        click.echo(f"schedule {name} resumed: its next tick is published when due")
    else:
        click.echo(f"schedule {name} was not paused")
