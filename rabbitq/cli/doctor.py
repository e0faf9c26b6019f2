"""``rabbitq doctor MODULE:APP``: what could lose messages or stop a worker, with the
fix for each. Exits 1 when there is a danger. Facts: :mod:`rabbitq._ops.doctor_probe`;
decisions: :mod:`rabbitq._ops.doctor`."""

from __future__ import annotations

import asyncio
import sys

import click

from .._ops.doctor import diagnose, worst
from .._ops.doctor_facts import Finding
from .._ops.doctor_probe import gather
from ..loader import load_app
from ..settings import TLS, Settings
from .common import friendly_errors, json_option, print_json, tls_options, url_option

# "info", not "ok": an info line states a fact (the broker's behaviour), not a verdict.
_MARK = {"info": "info", "warning": "WARN", "danger": "DANGER"}


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@json_option
@click.option(
    "--management-url",
    metavar="URL",
    help="RabbitMQ's management API [default: http://<broker host>:15672]; the broker "
    "URL's user and password are used.",
)
@click.option(
    "--consumer-timeout",
    type=float,
    default=None,
    envvar="RABBITQ_CONSUMER_TIMEOUT",
    help="The broker's consumer_timeout in seconds, if not RabbitMQ's default (30 min).",
)
@url_option
@tls_options
@friendly_errors
def doctor(
    app_spec: str,
    as_json: bool,
    management_url: str | None,
    consumer_timeout: float | None,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Check an app against its broker: version, queue arguments, retry queues, handler
    timeouts, alarms and policies that can drop or expire messages.

    Exits 1 if it found a danger (each finding says its fix), 0 otherwise. Examples:

    \b
        rabbitq doctor myservice:app
        rabbitq doctor myservice:app --json
        rabbitq doctor myservice:app --management-url http://rabbit:15672
    """
    app = load_app(app_spec)
    target = app.resolved_url(url)
    if consumer_timeout is None:
        consumer_timeout = Settings.from_env().consumer_timeout
    facts = asyncio.run(
        gather(
            app,
            url=target,
            tls=tls or app.tls,
            management_url=management_url,
            consumer_timeout=consumer_timeout,
        )
    )
    findings = diagnose(facts)
    if as_json:
        print_json(_as_json(facts.broker.version, findings))
    else:
        for finding in findings:
            _print(finding)
        dangers = sum(f.level == "danger" for f in findings)
        warnings = sum(f.level == "warning" for f in findings)
        click.echo(f"\n{dangers} danger(s), {warnings} warning(s)")
    if worst(findings) == "danger":
        sys.exit(1)


def _print(finding: Finding) -> None:
    click.echo(f"{_MARK[finding.level]:<6} [{finding.topic}] {finding.message}")
    if finding.fix:
        click.echo(f"       fix: {finding.fix}")


def _as_json(version: object, findings: list[Finding]) -> dict[str, object]:
    return {
        "broker_version": str(version) if version else None,
        "worst": worst(findings),
        "findings": [
            {"level": f.level, "topic": f.topic, "message": f.message, "fix": f.fix}
            for f in findings
        ],
    }
