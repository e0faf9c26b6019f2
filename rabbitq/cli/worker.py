"""``rabbitq worker``: parse the options into a :class:`~rabbitq._ops.run.WorkerSpec` and
run it, in this process or under the supervisor of ``--processes N``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .._ops import logs
from .._ops.endpoints import DEFAULT_BIND
from .._ops.run import WorkerSpec, run
from .._ops.supervisor import Supervisor
from .._worker.lifecycle import DEFAULT_GRACE_PERIOD
from ..errors import missing
from ..loader import load_app
from ..settings import CONSUMER_TIMEOUT_ENV, TLS, url_password
from .common import friendly_errors, tls_options, traceback_option, url_option


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option(
    "--prefetch", type=click.IntRange(min=1), help="Handlers in flight [default: the app's]."
)
@click.option(
    "--grace-period",
    type=click.FloatRange(min=0),
    default=DEFAULT_GRACE_PERIOD,
    show_default=True,
    help="Seconds that in-flight handlers get to finish on SIGTERM/SIGINT.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes, each with its own connection and PREFETCH handlers; "
    "a supervisor restarts any that dies.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve /metrics, /healthz and /readyz on this port [default: off].",
)
@click.option(
    "--metrics-bind",
    default=DEFAULT_BIND,
    show_default=True,
    help="Address for --metrics-port (127.0.0.1 keeps it local).",
)
@click.option("--log-json", is_flag=True, help="Log one JSON object per line.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    help="rabbitq's and the app's logs; debug adds one line per message handled.",
)
@click.option(
    "--log-level-libraries",
    type=click.Choice(["debug", "info", "warning", "error", logs.OFF], case_sensitive=False),
    default=logs.OFF,
    show_default=True,
    help="aio-pika's, aiormq's and pamqp's own logs (rabbitq reports what they would).",
)
@traceback_option
@click.option(
    "--consumer-timeout",
    type=click.FloatRange(min=0),
    envvar=CONSUMER_TIMEOUT_ENV,
    show_envvar=True,
    help="The broker's consumer_timeout in seconds (0: none), to check handler timeouts "
    "against [default: RabbitMQ's 1800].",
)
@click.option(
    "--no-schedules",
    is_flag=True,
    help="Do not run the app's schedules here (run them with rabbitq scheduler).",
)
@click.option(
    "--reload",
    is_flag=True,
    help="Development: restart the worker (drained) when a .py file under the app's "
    "directory (or --reload-dir) changes. Needs the reload extra.",
)
@click.option(
    "--reload-dir",
    "reload_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    help="Watch this directory instead of the app's (repeatable).",
)
@click.option(
    "--wait-for-broker",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Give up starting after SECONDS without a broker (0: exit at once, for scripts) "
    "[default: keep trying, logging each try, as a running worker reconnects].",
)
@url_option
@tls_options
@friendly_errors
def worker(
    app_spec: str,
    prefetch: int | None,
    grace_period: float,
    processes: int,
    metrics_port: int | None,
    metrics_bind: str,
    log_json: bool,
    log_level: str,
    log_level_libraries: str,
    consumer_timeout: float | None,
    no_schedules: bool,
    reload: bool,
    reload_dirs: tuple[str, ...],
    wait_for_broker: float | None,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Consume the app's queue until SIGTERM/SIGINT.

    Declares the topology, runs handlers with at most PREFETCH in flight, sends failures
    to the retry queues and the DLQ, and on a signal drains and exits 0. With
    --metrics-port, Prometheus metrics, liveness and readiness are served over HTTP
    (summed over all processes with --processes). The app's schedules run in every
    worker process unless --no-schedules; one of them at a time publishes the ticks.
    Example:

        rabbitq worker myservice:app --processes 2 --metrics-port 9100
    """
    spec = WorkerSpec(
        app_spec=app_spec,
        url=url,
        prefetch=prefetch,
        grace_period=grace_period,
        log_level=log_level,
        log_json=log_json,
        log_libraries=log_level_libraries,
        tls=tls,
        consumer_timeout=consumer_timeout,
        metrics_port=metrics_port,
        metrics_bind=metrics_bind,
        schedules=not no_schedules,
        start_wait=wait_for_broker,
    )
    if reload and processes > 1:
        raise click.UsageError("--reload runs one worker process: drop --processes")
    if reload:  # development
        _reload(spec, reload_dirs)
    if processes == 1:
        run(spec)  # on uvloop if it is installed
        return
    app = load_app(app_spec)  # a bad MODULE:APP fails here, before any process starts
    logs.configure(
        level=log_level,
        json=log_json,
        secrets=[url_password(app.resolved_url(url)) or ""],
        libraries=log_level_libraries,
    )
    sys.exit(Supervisor(spec, processes=processes).run())


def _reload(spec: WorkerSpec, reload_dirs: tuple[str, ...]) -> None:
    """``--reload``: run the worker under the reloader until a signal, then exit
    (rabbitq._ops.reload)."""
    app = load_app(spec.app_spec)
    url = app.resolved_url(spec.url)
    logs.configure(level=spec.log_level, json=spec.log_json, secrets=[url_password(url) or ""])
    try:
        from .._ops import reload as reloading
    except ImportError as exc:
        raise click.ClickException(missing("rabbitq worker --reload", exc)) from None
    dirs = [Path(d).resolve() for d in reload_dirs] or [reloading.app_directory(spec.app_spec)]
    sys.exit(reloading.Reloader(spec, dirs).run())
