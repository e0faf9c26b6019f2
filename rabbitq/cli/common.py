"""What the ``rabbitq`` commands share: ``--url``, ``--tls-*``, ``--json`` and one-line
errors (with the Python traceback before them on ``--traceback`` or ``$RABBITQ_TRACEBACK``).

Its own module so that the command modules can use it without importing each other.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..errors import ConfigurationError, RabbitqError
from ..settings import TLS, URL_ENV, broker_urls, configured_url, scrub, url_password

F = TypeVar("F", bound=Callable[..., Any])


def _join_urls(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> str | None:
    """Several ``--url`` (the nodes of a cluster) become one comma-separated URL; one
    that is not an AMQP URL is bad input (exit 2), said before anything connects."""
    if not value:
        return None
    joined = ",".join(value)
    try:
        broker_urls(joined)
    except ConfigurationError as exc:  # the message masks the password
        raise click.UsageError(str(exc)) from None
    return joined


url_option = click.option(
    "--url",
    envvar=URL_ENV,
    multiple=True,
    callback=_join_urls,
    show_envvar=True,
    help="AMQP URL of the broker [default: amqp://guest:guest@localhost:5672/]. Repeat it "
    "(or separate URLs with commas) for the nodes of a cluster: workers fail over between them.",
)


TRACEBACK_ENV = "RABBITQ_TRACEBACK"
"""Set to 1: a command that fails prints the Python traceback before its one-line error."""

traceback_option = click.option(
    "--traceback",
    "show_traceback",
    is_flag=True,
    envvar=TRACEBACK_ENV,
    show_envvar=True,
    help="On an error (e.g. importing MODULE:APP), print the Python traceback too.",
)
"""``--traceback``: read by :func:`friendly_errors`, which takes it out of the kwargs."""


def _env_asks_traceback() -> bool:
    return os.environ.get(TRACEBACK_ENV, "").lower() in ("1", "true", "yes", "on")


def friendly_errors(fn: F) -> F:
    """Turn rabbitq's errors into a one-line message (no password) and exit status 1;
    with ``--traceback`` (``show_traceback``) or ``$RABBITQ_TRACEBACK`` set, the Python
    traceback comes first (its password scrubbed too); an ``app_spec`` that is not of the
    form ``MODULE:APP`` is bad usage (exit 2)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        url = kwargs.get("url")
        show = kwargs.pop("show_traceback", False) or _env_asks_traceback()
        spec = kwargs.get("app_spec")
        if isinstance(spec, str) and not all(spec.partition(":")[::2]):
            raise click.UsageError(
                f"expected MODULE:APP (for example 'myservice.tasks:app'), got {spec!r}"
            )
        try:
            return fn(*args, **kwargs)
        except RabbitqError as exc:
            secret = url_password(configured_url(url))
            if show:  # what went wrong (the user's code, for an import): not rabbitq's frames
                trace = traceback.format_exception(exc.__cause__ or exc)
                click.echo(scrub("".join(trace), secret), err=True)
            raise click.ClickException(scrub(str(exc), secret)) from exc

    return wrapper  # type: ignore[return-value]


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


class Command(click.Group):
    """The root group: a usage error is one line that says where help is, not click's
    block of usage, hint and error."""

    def main(  # type: ignore[override]
        self, args: Any = None, prog_name: str | None = None, **extra: Any
    ) -> Any:
        if extra.pop("standalone_mode", True) is False:
            return super().main(args, prog_name, standalone_mode=False, **extra)
        try:
            result = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "rabbitq"
            message = exc.format_message().rstrip(".")
            click.echo(f"Error: {message} (see '{where} --help')", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)
