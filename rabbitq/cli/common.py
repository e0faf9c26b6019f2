"""What the ``rabbitq`` commands share: ``--url``, ``--tls-*``, ``--json`` and one-line
errors (with the Python traceback before them on ``--traceback`` or ``$RABBITQ_TRACEBACK``).

The ``--json`` rule, for every command (docs/cli.md, "JSON output"): stdout holds exactly
one JSON document, on one line, ASCII only: an array for a listing, an object for one
result. An error under ``--json`` is that document too, ``{"error": ..., "exit_code": N}``
(N is the exit status, 1 or 2), and its usual one line still goes to stderr.

Its own module so that the command modules can use it without importing each other.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from datetime import date, datetime
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
            failure = click.ClickException(scrub(str(exc), secret))
            if fields := getattr(exc, "json_fields", None):
                attach_json(failure, **fields)
            raise failure from exc

    return wrapper  # type: ignore[return-value]


JSON_FLAG = "--json"

json_option = click.option(
    JSON_FLAG,
    "as_json",
    is_flag=True,
    help="Print one JSON document on stdout instead of text (an error too).",
)
"""``--json`` (as ``as_json``): the same option, the same help, on every command."""


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def json_text(document: Any) -> str:
    """``document`` as one line of JSON, ASCII only (a control character or an escape
    sequence from a message cannot reach the terminal raw); times in ISO 8601."""
    return json.dumps(document, ensure_ascii=True, separators=(",", ":"), default=_plain)


def print_json(document: Any) -> None:
    """Print the one JSON document of a ``--json`` command on stdout."""
    click.echo(json_text(document))


class Reported(click.ClickException):
    """An error after the command printed its result (a replay with failures): under
    ``--json`` no error document follows the result document."""


def attach_json(exc: BaseException, **fields: Any) -> None:
    """Fields the error document of ``exc`` carries under ``--json`` besides ``error``
    and ``exit_code`` (what an interrupted DLQ run did so far)."""
    extra = getattr(exc, "json_fields", {})
    exc.json_fields = {**extra, **fields}  # type: ignore[attr-defined]


def asks_json(args: Sequence[str]) -> bool:
    """Whether the command line asks for ``--json`` (before a ``--``); read from the
    words, as an error may come before the options are parsed."""
    words = list(args)
    if "--" in words:
        words = words[: words.index("--")]
    return JSON_FLAG in words


def error_document(message: str, exit_code: int, exc: BaseException | None = None) -> str:
    """The ``--json`` document of an error: ``{"error": ..., "exit_code": N}``."""
    fields = getattr(exc, "json_fields", None) or {}
    cause = getattr(exc, "__cause__", None)
    fields = {**(getattr(cause, "json_fields", None) or {}), **fields}
    return json_text({"error": message, "exit_code": exit_code, **fields})


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
        as_json = asks_json(sys.argv[1:] if args is None else args)
        try:
            result = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "rabbitq"
            message = exc.format_message().rstrip(".")
            if as_json:
                click.echo(error_document(message, exc.exit_code, exc))
            click.echo(f"Error: {message} (see '{where} --help')", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            if as_json and not isinstance(exc, Reported):
                click.echo(error_document(exc.format_message(), exc.exit_code, exc))
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            if as_json:
                click.echo(error_document("aborted", 1))
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)
