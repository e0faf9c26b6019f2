"""What every ``rabbitq`` command shares: ``--url`` and one-line errors.

Its own module so that the command groups (``cli``, ``cli_dlq``) can use it without
importing each other.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .errors import RabbitqError
from .settings import URL_ENV, resolve_url, scrub, url_password

F = TypeVar("F", bound=Callable[..., Any])

url_option = click.option(
    "--url",
    envvar=URL_ENV,
    default=None,
    show_envvar=True,
    help="AMQP URL of the broker [default: amqp://guest:guest@localhost:5672/].",
)


def friendly_errors(fn: F) -> F:
    """Turn rabbitq's errors into a one-line message (no password) and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        url = kwargs.get("url")
        try:
            return fn(*args, **kwargs)
        except RabbitqError as exc:
            resolved = resolve_url(url)
            raise click.ClickException(scrub(str(exc), url_password(resolved))) from exc

    return wrapper  # type: ignore[return-value]
