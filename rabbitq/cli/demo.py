"""``rabbitq demo``: the whole flow, live, on a real or a throwaway broker."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys

import click
from click.core import ParameterSource
from rich.console import Console

from .._ops import containers
from ..settings import TLS, redact_url, resolve_url
from .common import Reported, friendly_errors, json_option, print_json, tls_options, url_option

DEMO_QUEUE_ENV = "RABBITQ_DEMO_QUEUE"


def _has_command(name: str) -> bool:
    root = click.get_current_context().find_root().command
    return isinstance(root, click.Group) and name in root.commands


def _program() -> str:
    """How to run this command again: ``rabbitq`` when that is what PATH finds, else the
    path it was run by (``.venv/bin/rabbitq`` right after the README's install)."""
    argv0 = sys.argv[0]
    if os.path.basename(argv0) != "rabbitq":  # python -m rabbitq, a test's runner
        return "rabbitq"
    found = shutil.which("rabbitq")
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        return "rabbitq"
    return argv0


def _queue_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if not value or value.startswith("amq.") or len(value.encode()) > 200:
        raise click.BadParameter(
            f"{value!r} cannot be a queue name (empty, amq.*, or too long)", param_hint="--queue"
        )
    return value


@click.command()
@click.option(
    "--queue",
    default="rabbitq-demo",
    show_default=True,
    envvar=DEMO_QUEUE_ENV,
    show_envvar=True,
    callback=_queue_name,
    help="Name of the demo's queue and exchange (its retry queues and DLQ follow), so that "
    "the demo never meets a real app's, or another person's demo.",
)
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
@json_option
@url_option
@tls_options
@friendly_errors
def demo(
    queue: str,
    count: int,
    timeout: float,
    cleanup: bool,
    use_testcontainers: bool,
    as_json: bool,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Show the whole flow: handled, retried and dead-lettered messages, live.

    Declares a demo app on queue and exchange --queue (an email and a payment
    handler; retries after 1 s, then 3 s), runs its worker in-process, publishes a
    batch in which some messages fail once or twice, some every time, one card is
    declined, one body is not JSON and one type has no handler, and shows the tally
    until every message is handled or dead-lettered (about 5 s).

    Each run first empties the demo's own queues, so it is safe to run again; the
    queues are kept afterwards so you can look at the DLQ. Remove them with
    rabbitq demo --cleanup. Examples:

    \b
        rabbitq demo
        rabbitq demo --queue my-demo --count 50
        rabbitq demo --testcontainers
        rabbitq demo --cleanup
    """
    from .. import demo as showcase  # registers the demo's message types only when used

    if cleanup and use_testcontainers:
        raise click.UsageError("--cleanup and --testcontainers do not go together")
    target = resolve_url(url)
    if cleanup:
        done = asyncio.run(showcase.cleanup(target, queue=queue, exchange=queue, tls=tls))
        names = [q.name for q in done.queues]
        if as_json:
            print_json({"deleted_queues": names, "messages": done.messages})
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
                broker,
                console=console,
                display=display,
                count=count,
                timeout=timeout,
                queue=queue,
                exchange=queue,
                tls=None if use_testcontainers else tls,
            )
        )

    if use_testcontainers:
        if not as_json:  # --json: the tally on stdout, nothing on stderr
            click.echo(f"starting a throwaway RabbitMQ ({containers.CONTAINER_IMAGE})...", err=True)
        with containers.throwaway_broker() as broker:
            summary = go(broker)
    else:
        summary = go(target)
    if as_json:
        print_json(summary.as_dict())
    else:
        url_given = click.get_current_context().get_parameter_source("url") == (
            ParameterSource.COMMANDLINE
        )
        showcase.print_summary(
            console,
            summary,
            next_steps=not use_testcontainers,
            url_given=url_given,
            dlq_tool=_has_command("dlq"),
            program=_program(),
        )
    if not summary.ok:
        raise Reported(summary.problem or "the demo failed")  # after its tally
