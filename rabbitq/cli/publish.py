"""``rabbitq publish``: validate JSON as a typed message and publish it with a confirm."""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import click
import orjson
from pydantic import AliasChoices, BaseModel, ValidationError

from .._amqp.lanes import check_priority
from .._amqp.outgoing import KEY_STEPS, require_step
from ..app import App
from ..errors import ConfigurationError
from ..ladder.plan import MAX_DELAY, due_in
from ..loader import load_app
from ..message import describe, lookup
from ..settings import TLS
from ..unique.steps import check_key
from .common import friendly_errors, json_option, print_json, tls_options, url_option
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


def _when(at: str, now: datetime | None = None) -> datetime:
    """``--at``: an ISO 8601 time with its offset, still to come (exit 2 otherwise, before
    connecting: a time in the past is a typo more often than a wish to publish now)."""
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        raise click.BadParameter(
            f"not an ISO 8601 time: {at!r} (for example 2030-12-01T09:00:00+01:00)",
            param_hint="--at",
        ) from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise click.BadParameter(
            f"{at!r} has no offset: add Z for UTC or the offset of its timezone "
            f"({at}Z, {at}+01:00)",
            param_hint="--at",
        )
    now = now or datetime.now(UTC)
    if when <= now:
        raise click.BadParameter(
            f"{at} is in the past (it is {now.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ} now): give "
            "a later time, or leave --at out to publish now",
            param_hint="--at",
        )
    return when


def check_options(
    app: App,
    *,
    priority: int,
    unique_for: float | None,
    unique_key: str | None,
    debounce: float | None,
    delayed: bool,
) -> None:
    """``--priority``, ``--unique-for``, ``--unique-key`` and ``--debounce`` checked
    against each other and the app, with the library's own checks: a wrong one is bad
    input (exit 2), said before connecting."""
    if unique_key is not None and unique_for is None and debounce is None:
        raise click.UsageError("--unique-key needs --unique-for or --debounce")
    if unique_for is not None and debounce is not None:
        raise click.UsageError("--unique-for and --debounce do not go together: give one")
    if debounce is not None and unique_key is None:
        raise click.UsageError("--debounce needs --unique-key: the key of the burst")
    if debounce is not None and delayed:
        raise click.UsageError("--debounce delays the message itself: drop --delay / --at")
    for name, value in (("--unique-for", unique_for), ("--debounce", debounce)):
        if value is not None and not value > 0:
            raise click.BadParameter(f"must be more than 0 seconds, not {value:g}", param_hint=name)
    try:
        if unique_key is not None:
            check_key(unique_key)
        check_priority(priority, app.priorities)
        if unique_for is not None or debounce is not None:
            step = "unique" if debounce is None else "debounce"
            require_step(app.publish_steps, step, KEY_STEPS[step])
    except ConfigurationError as exc:  # the library's words, with the option's name
        text = str(exc).replace("priority=", "--priority ").replace("unique_for", "--unique-for")
        raise click.UsageError(text.replace("unique_key", "--unique-key")) from None


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
    help="Deliver at this time, with its offset (2030-12-01T09:00:00+01:00 or ...Z); "
    "only this app's queue gets it.",
)
@click.option(
    "--priority",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="0 (the lowest) to N-1 for an app with App(priorities=N).",
)
@click.option(
    "--unique-for",
    type=DURATION,
    help="Send it only if no message of its key was sent in this window (90s, 10m); "
    "else print the earlier message's id. Needs an app with a store.",
)
@click.option(
    "--unique-key",
    metavar="KEY",
    help="The key of --unique-for [default: the message_id] or of --debounce.",
)
@click.option(
    "--debounce",
    type=DURATION,
    help="With --unique-key: handled once, this long after the key's last publish, with "
    "the last payload. Needs App(debounce=True, backend=...).",
)
@json_option
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
    priority: int,
    unique_for: float | None,
    unique_key: str | None,
    debounce: float | None,
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
        rabbitq publish myservice:app reminder.send '{...}' --at 2030-12-01T09:00:00+01:00
        rabbitq publish myservice:app report.build '{...}' --unique-for 10m --priority 2

    --json prints one object: message_id, type, exchange, due.
    """
    if delay is not None and at is not None:
        raise click.UsageError("--delay and --at do not go together: give one")
    app = load_app(app_spec)
    message = _parse_body(app, type_name, body)
    when = None if at is None else _when(at)
    check_options(
        app,
        priority=priority,
        unique_for=unique_for,
        unique_key=unique_key,
        debounce=debounce,
        delayed=delay is not None or when is not None,
    )
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

    own = message_id or uuid.uuid4().hex  # as the publisher makes one: to tell a dedup

    async def go() -> str:
        async with app.publisher(url=url, tls=tls) as pub:
            return await pub.publish(
                message,
                message_id=own,
                correlation_id=correlation_id,
                delay=delay,
                at=when,
                priority=priority,
                unique_for=unique_for,
                unique_key=unique_key,
                debounce=debounce,
            )

    mid = asyncio.run(go())
    if as_json:
        document = {
            "message_id": mid,
            "type": type_name,
            "exchange": app.exchange,
            "due": None if due is None else due.isoformat(),
            "deduplicated": mid != own,
        }
        print_json(document)
        return
    if mid != own:  # --unique-for: the key is held by an earlier message
        click.echo(f"not published: {type_name} message_id={mid} holds its key (--unique-for)")
        return
    click.echo(f"published {type_name} message_id={mid} to exchange {app.exchange!r}")
