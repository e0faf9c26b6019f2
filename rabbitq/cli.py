"""The ``rabbitq`` command: parse arguments, set up logging, call library functions.

Every command takes ``--url`` (default ``$RABBITQ_URL``), never prints a password, and
turns a failure into one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import threading
import time
from typing import Any

import click
import orjson
from click.core import ParameterSource
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from . import containers, logs, loop
from .app import App, load_app
from .cli_common import F, friendly_errors, url_option
from .codec import describe
from .connection import connect
from .consumer import DEFAULT_GRACE_PERIOD, HANDLER_THREAD_PREFIX, Worker
from .endpoints import DEFAULT_BIND, serve_metrics
from .errors import ConfigurationError
from .message import lookup
from .metrics import Metrics
from .retry import RetryPolicy
from .settings import (
    CONSUMER_TIMEOUT_ENV,
    TLS,
    redact_url,
    resolve_url,
    url_password,
)
from .topology import Topology, declare, delay_ms, dlq_name, queue_depths, retry_queue_name

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def tls_options(fn: F) -> F:
    """``--tls-ca``, ``--tls-cert``, ``--tls-key``, passed on as ``tls`` (None: the
    ``$RABBITQ_TLS_*`` files, read by rabbitq.settings when connecting)."""

    @functools.wraps(fn)
    def wrapper(
        *args: Any, tls_ca: str | None, tls_cert: str | None, tls_key: str | None, **kwargs: Any
    ) -> Any:
        given = tls_ca or tls_cert or tls_key
        tls = TLS(ca=tls_ca, cert=tls_cert, key=tls_key) if given else None
        return fn(*args, tls=tls, **kwargs)

    path = click.Path(dir_okay=False)
    for name, what in (
        ("--tls-key", "Client private key (PEM, unencrypted) [env: RABBITQ_TLS_KEY]."),
        (
            "--tls-cert",
            "Client certificate (PEM) for brokers that verify clients [env: RABBITQ_TLS_CERT].",
        ),
        (
            "--tls-ca",
            "CA bundle (PEM) to verify an amqps:// broker [env: RABBITQ_TLS_CA; "
            "default: the system's].",
        ),
    ):
        wrapper = click.option(name, type=path, default=None, help=what)(wrapper)
    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rabbitq")
def main() -> None:
    """rabbitq: RabbitMQ consumers that never lose work.

    Run a worker for an app (rabbitq worker myservice:app), try the whole flow with
    rabbitq demo, publish a message by hand, declare the queues, or look at their depths.
    """
    logs.configure(level="WARNING")


@main.command()
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
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
@click.option(
    "--consumer-timeout",
    type=click.FloatRange(min=0),
    envvar=CONSUMER_TIMEOUT_ENV,
    show_envvar=True,
    help="The broker's consumer_timeout in seconds (0: none), to check handler timeouts "
    "against [default: RabbitMQ's 1800].",
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
    consumer_timeout: float | None,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Consume the app's queue until SIGTERM/SIGINT.

    Declares the topology, runs handlers with at most PREFETCH in flight, sends failures
    to the retry queues and the DLQ, and on a signal drains and exits 0. With
    --metrics-port, Prometheus metrics, liveness and readiness are served over HTTP
    (summed over all processes with --processes).
    """
    app = load_app(app_spec)
    if processes > 1:
        from .supervisor import Supervisor, WorkerSpec

        logs.configure(
            level=log_level, json=log_json, secrets=[url_password(app.resolved_url(url)) or ""]
        )
        spec = WorkerSpec(
            app_spec=app_spec,
            url=url,
            prefetch=prefetch,
            grace_period=grace_period,
            log_level=log_level,
            log_json=log_json,
            tls=tls,
            consumer_timeout=consumer_timeout,
        )
        supervisor = Supervisor(
            spec, processes=processes, metrics_port=metrics_port, metrics_bind=metrics_bind
        )
        sys.exit(supervisor.run())
    metrics = Metrics() if metrics_port is not None else None
    worker = Worker(
        app,
        url=url,
        prefetch=prefetch,
        grace_period=grace_period,
        hooks=metrics,
        tls=tls,
        consumer_timeout=consumer_timeout,
    )
    logs.configure(level=log_level, json=log_json, secrets=[url_password(worker.url) or ""])
    loop.run(_run_worker(worker, metrics, metrics_port, metrics_bind))  # uvloop if installed
    _exit_if_handlers_stuck()


async def _run_worker(worker: Worker, metrics: Metrics | None, port: int | None, bind: str) -> None:
    if metrics is None or port is None:
        await worker.run(install_signal_handlers=True)
        return
    async with serve_metrics(worker, metrics, port=port, bind=bind):
        await worker.run(install_signal_handlers=True)


def _exit_if_handlers_stuck(wait: float = 0.25) -> None:
    """Exit now if sync handlers outlived the grace period.

    Their threads cannot be stopped, and the interpreter would wait for them at exit
    (concurrent.futures joins its threads), far past the grace period. Their messages
    are already back in the queue and the connection is closed, so nothing is lost by
    leaving them behind. Idle handler threads end at once and are not waited for.
    """
    deadline = time.monotonic() + wait
    threads = [t for t in threading.enumerate() if t.name.startswith(HANDLER_THREAD_PREFIX)]
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = sum(1 for t in threads if t.is_alive())
    if stuck:
        logging.getLogger("rabbitq.worker").warning(
            "%d sync handler(s) still running after the grace period: exiting without "
            "waiting for them (their messages were returned to the queue)",
            stuck,
        )
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _parse_body(app: App, type_name: str, body: str) -> Any:
    if type_name not in app.handlers:
        model = lookup(type_name)
        if model is None:
            known = ", ".join(sorted(app.handlers)) or "none"
            raise ConfigurationError(
                f"unknown message type {type_name!r} (this app handles: {known})"
            )
    else:
        model = app.handlers[type_name].model
    text = sys.stdin.read() if body == "-" else body
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="JSON") from exc
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise click.BadParameter(
            f"{type_name} failed validation: {describe(exc)}", param_hint="JSON"
        ) from None


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("type_name", metavar="TYPE")
@click.argument("body", metavar="JSON")
@click.option("--message-id", help="Use this message_id instead of a new uuid4.")
@click.option("--correlation-id", help="Set the correlation_id property.")
@click.option(
    "--delay",
    type=float,
    help="Seconds to wait first; must equal one of the app's retry delays. "
    "A delayed message reaches only this app's queue.",
)
@url_option
@tls_options
@friendly_errors
def publish(
    app_spec: str,
    type_name: str,
    body: str,
    message_id: str | None,
    correlation_id: str | None,
    delay: float | None,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Validate JSON as a TYPE message and publish it, waiting for the broker's confirm.

    JSON is the message's fields as an object, or - to read it from stdin. Example:

        rabbitq publish examples.email_service:app email.send '{"to": "a@b.c", ...}'
    """
    app = load_app(app_spec)
    message = _parse_body(app, type_name, body)
    if delay is not None:
        app.topology().retry_queue(delay_ms(delay))  # a bad delay fails before connecting

    async def go() -> str:
        async with app.publisher(url=url, tls=tls) as pub:
            return await pub.publish(
                message, message_id=message_id, correlation_id=correlation_id, delay=delay
            )

    mid = asyncio.run(go())
    click.echo(f"published {type_name} message_id={mid} to exchange {app.exchange!r}")


def _topology_rows(topology: Topology) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"kind": "exchange", "name": topology.exchange, "arguments": {"type": "topic"}}
    ]
    rows += [
        {"kind": q.kind, "name": q.name, "arguments": dict(q.arguments)} for q in topology.queues
    ]
    rows += [
        {
            "kind": "binding",
            "name": f"{topology.exchange} -> {topology.main.name}",
            "arguments": {"routing_key": k},
        }
        for k in topology.routing_keys
    ]
    return rows


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--dry-run", is_flag=True, help="Print what would be declared; touch nothing.")
@json_option
@url_option
@tls_options
@friendly_errors
def topology(app_spec: str, dry_run: bool, as_json: bool, url: str | None, tls: TLS | None) -> None:
    """Declare the app's exchange, queues and bindings, and print them.

    Safe to run again: declaring what exists is a no-op. If a queue exists with other
    arguments, that queue is left as it is (objects declared before it stay declared)
    and the error names the queue and the argument.
    """
    app = load_app(app_spec)
    plan = app.topology()
    if not dry_run:
        target = app.resolved_url(url)

        async def go() -> None:
            connection = await connect(target, name="rabbitq topology", tls=tls or app.tls)
            try:
                await declare(await connection.channel(), plan)
            finally:
                await connection.close()

        asyncio.run(go())
    rows = _topology_rows(plan)
    if as_json:
        for row in rows:
            click.echo(orjson.dumps(row).decode())
        return
    table = Table(title=f"{'would declare' if dry_run else 'declared'} for {app.queue!r}")
    for column in ("kind", "name", "arguments"):
        table.add_column(column)
    for row in rows:
        args = ", ".join(f"{k}={v!r}" for k, v in row["arguments"].items())
        table.add_row(row["kind"], row["name"], args)
    Console().print(table)


@main.command()
@click.argument("target", metavar="QUEUE|MODULE:APP")
@click.option(
    "--delay",
    "delays",
    type=float,
    multiple=True,
    help="Also look for the retry queue of this delay in seconds (repeatable). "
    "Default with a QUEUE: the default policy's 1s, 10s, 1m, 10m.",
)
@json_option
@url_option
@tls_options
@friendly_errors
def stats(
    target: str, delays: tuple[float, ...], as_json: bool, url: str | None, tls: TLS | None
) -> None:
    """Messages and consumers of the main, retry and dead-letter queues.

    With MODULE:APP every retry queue of the app is shown; with a QUEUE name, the
    retry queues of --delay (or the default policy) that exist.
    """
    if ":" in target:
        app = load_app(target)
        plan = app.topology()
        specs = [(q.name, q.kind) for q in plan.queues]
        broker_url = app.resolved_url(url)
        tls = tls or app.tls
        show_missing = True
    else:
        ms = [delay_ms(d) for d in delays] if delays else RetryPolicy().delays_ms
        specs = [
            (target, "main"),
            *((retry_queue_name(target, m), "retry") for m in sorted(set(ms))),
        ]
        specs.append((dlq_name(target), "dlq"))
        broker_url = resolve_url(url)
        show_missing = bool(delays)

    async def go() -> list[Any]:
        connection = await connect(broker_url, name="rabbitq stats", tls=tls)
        try:
            return await queue_depths(connection, specs)
        finally:
            await connection.close()

    depths = asyncio.run(go())
    main_depth = depths[0]
    if not main_depth.exists:
        raise click.ClickException(
            f"queue {main_depth.name!r} does not exist on {redact_url(broker_url)} "
            f"(run 'rabbitq topology MODULE:APP' or start its worker once)"
        )
    shown = [d for d in depths if d.exists or (show_missing and d.kind != "main")]
    if as_json:
        for d in shown:
            click.echo(
                orjson.dumps(
                    {
                        "queue": d.name,
                        "kind": d.kind,
                        "exists": d.exists,
                        "messages": d.messages,
                        "consumers": d.consumers,
                    }
                ).decode()
            )
        return
    table = Table(title=f"queues of {main_depth.name!r}")
    for column, justify in (
        ("queue", "left"),
        ("kind", "left"),
        ("messages", "right"),
        ("consumers", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for d in shown:
        if d.exists:
            table.add_row(d.name, d.kind, str(d.messages), str(d.consumers))
        else:
            table.add_row(d.name, d.kind, "missing", "-")
    Console().print(table)


@main.command()
@click.option(
    "--count",
    type=click.IntRange(min=0, max=200),
    default=16,
    show_default=True,
    help="Ordinary messages, handled at the first attempt; the failing ones are always sent.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60,
    show_default=True,
    help="Fail if the demo has not settled after this many seconds.",
)
@click.option(
    "--cleanup",
    is_flag=True,
    help="Delete the demo's queues and exchange, then exit (runs nothing).",
)
@click.option(
    "--testcontainers",
    "use_testcontainers",
    is_flag=True,
    help="Run against a throwaway RabbitMQ container (needs Docker and testcontainers).",
)
@click.option("--json", "as_json", is_flag=True, help="Print only the final tally, as JSON.")
@url_option
@friendly_errors
def demo(
    count: int,
    timeout: float,
    cleanup: bool,
    use_testcontainers: bool,
    as_json: bool,
    url: str | None,
) -> None:
    """Show the whole flow: handled, retried and dead-lettered messages, live.

    Declares a demo app on queue and exchange 'rabbitq-demo' (an email and a payment
    handler; retries after 1 s, then 3 s), runs its worker in-process, publishes a
    batch in which some messages fail once or twice, some every time, one card is
    declined, one body is not JSON and one type has no handler, and shows the tally
    until every message is handled or dead-lettered (about 5 s).

    Each run first empties the demo's own queues, so it is safe to run again; the
    queues are kept afterwards so you can look at the DLQ. Remove them with
    rabbitq demo --cleanup.
    """
    from . import demo as showcase  # registers the demo's message types only when used

    if cleanup and use_testcontainers:
        raise click.UsageError("--cleanup and --testcontainers do not go together")
    target = resolve_url(url)
    if cleanup:
        done = asyncio.run(showcase.cleanup(target))
        names = [q.name for q in done.queues]
        if as_json:
            click.echo(orjson.dumps({"deleted_queues": names, "messages": done.messages}).decode())
        elif names:
            click.echo(
                f"deleted {', '.join(names)} ({done.messages} messages) "
                f"and exchange {done.exchange}"
            )
        else:
            click.echo(f"nothing to delete: no demo queues on {redact_url(target)}")
        return

    console = Console()
    display: showcase.Display = "none" if as_json else "live" if console.is_terminal else "plain"

    def go(broker: str) -> showcase.DemoSummary:
        return asyncio.run(
            showcase.run_demo(
                broker, console=console, display=display, count=count, timeout=timeout
            )
        )

    if use_testcontainers:
        click.echo(f"starting a throwaway RabbitMQ ({containers.CONTAINER_IMAGE})...", err=True)
        with containers.throwaway_broker() as broker:
            summary = go(broker)
    else:
        summary = go(target)
    if as_json:
        click.echo(orjson.dumps(summary.as_dict()).decode())
    else:
        url_given = click.get_current_context().get_parameter_source("url") == (
            ParameterSource.COMMANDLINE
        )
        showcase.print_summary(
            console,
            summary,
            next_steps=not use_testcontainers,
            url_given=url_given,
            dlq_tool="dlq" in main.commands,
        )
    if not summary.ok:
        raise click.ClickException(summary.problem or "the demo failed")


from .cli_dlq import dlq  # noqa: E402 (the dlq commands live in their own module)

main.add_command(dlq)
