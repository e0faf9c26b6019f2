"""``rabbitq publish``: validate JSON as a typed message and publish it with a confirm."""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime
from typing import Any

import click
import orjson
from pydantic import AliasChoices, BaseModel, ValidationError

from ..app import App
from ..ladder.plan import MAX_DELAY, due_in
from ..loader import load_app
from ..message import describe, lookup
from ..settings import TLS
from .common import friendly_errors, tls_options, url_option
from .when import DURATION


def _field_names(model: type[BaseModel]) -> set[str]:
    """The keys a model's JSON may have: field names and their aliases."""
    names = set(model.model_fields)
    for field in model.model_fields.values():
        for alias in (field.alias, field.validation_alias):
            if isinstance(alias, str):
                names.add(alias)
            elif isinstance(alias, AliasChoices):
                names.update(a for a in alias.choices if isinstance(a, str))
    return names


def _parse_body(app: App, type_name: str, body: str) -> Any:
    if type_name not in app.handlers:
        model = lookup(type_name)
        if model is None:
            known = ", ".join(sorted(app.handlers)) or "none"
            raise click.BadParameter(  # bad input, as a failed validation: exit 2
                f"unknown message type {type_name!r} (this app handles: {known})",
                param_hint="TYPE",
            )
    else:
        model = app.handlers[type_name].model
    text = sys.stdin.read() if body == "-" else body
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="JSON") from exc
    if isinstance(data, dict) and (unknown := sorted(set(data) - _field_names(model))):
        # A person typed this: "sbuject" is a typo, not something to drop in silence
        # (whatever the model does with extra fields when the worker decodes).
        raise click.BadParameter(
            f"unknown field(s) {', '.join(map(repr, unknown))} for {type_name} "
            f"(its fields: {', '.join(model.model_fields)})",
            param_hint="JSON",
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise click.BadParameter(
            f"{type_name} failed validation: {describe(exc)}", param_hint="JSON"
        ) from None


def _when(at: str) -> datetime:
    """``--at``: an ISO 8601 time with its offset (exit 2 otherwise, before connecting)."""
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        raise click.BadParameter(
            f"not an ISO 8601 time: {at!r} (for example 2026-12-01T09:00:00+01:00)",
            param_hint="--at",
        ) from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise click.BadParameter(
            f"{at!r} has no offset: add Z for UTC or the offset of its timezone "
            f"({at}Z, {at}+01:00)",
            param_hint="--at",
        )
    return when


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.argument("type_name", metavar="TYPE")
@click.argument("body", metavar="JSON")
@click.option("--message-id", help="Use this message_id instead of a new uuid4.")
@click.option("--correlation-id", help="Set the correlation_id property.")
@click.option(
    "--delay",
    type=DURATION,
    help="Wait this long first: seconds or a unit (30, 90s, 5m, 2h, 3d; at most 48 days, "
    "held by the broker's delay ladder); a delayed message reaches only this app's queue.",
)
@click.option(
    "--at",
    "at",
    metavar="ISO-8601",
    help="Deliver at this time, with its offset (2026-12-01T09:00:00+01:00 or ...Z); "
    "only this app's queue gets it.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object (message_id, type, exchange, due) instead of a line.",
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
    at: str | None,
    as_json: bool,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Validate JSON as a TYPE message and publish it, waiting for the broker's confirm.

    JSON is the message's fields as an object, or - to read it from stdin. Examples:

    \b
        rabbitq publish examples.email_service:app email.send \\
            '{"to": "a@example.com", "subject": "hi", "body": "hello"}'
        echo '{"to": "a@example.com", "subject": "hi", "body": "x"}' | \\
            rabbitq publish examples.email_service:app email.send - --delay 5m
        rabbitq publish myservice:app reminder.send '{...}' --at 2026-12-01T09:00:00+01:00
    """
    if delay is not None and at is not None:
        raise click.UsageError("--delay and --at do not go together: give one")
    app = load_app(app_spec)
    message = _parse_body(app, type_name, body)
    when = None if at is None else _when(at)
    due = None
    if delay is not None or when is not None:
        try:  # a bad delay or time fails before connecting, as bad input (exit 2)
            _, due = due_in(delay=delay, at=when)
        except ValueError as exc:
            hint = "--at" if at is not None else "--delay"
            asked = (
                f"--at {at}" if at is not None else f"--delay of {(delay or 0) / 86400:.4g} days"
            )
            text = (
                f"{asked} is past what the delay ladder holds (at most {MAX_DELAY.days} "
                "days from now): publish it later, e.g. from a schedule"
                if "longer than the delay ladder" in str(exc)
                else str(exc).replace("delay=", "--delay ").replace("at=", "--at ")
            )
            raise click.BadParameter(text, param_hint=hint) from None

    async def go() -> str:
        async with app.publisher(url=url, tls=tls) as pub:
            return await pub.publish(
                message,
                message_id=message_id,
                correlation_id=correlation_id,
                delay=delay,
                at=when,
            )

    mid = asyncio.run(go())
    if as_json:
        document = {
            "message_id": mid,
            "type": type_name,
            "exchange": app.exchange,
            "due": None if due is None else due.isoformat(),
        }
        click.echo(orjson.dumps(document).decode())
        return
    click.echo(f"published {type_name} message_id={mid} to exchange {app.exchange!r}")
