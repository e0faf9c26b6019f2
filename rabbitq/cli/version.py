"""``rabbitq version``: the installed version, as ``rabbitq -V`` and ``--version`` print it."""

from __future__ import annotations

from importlib.metadata import version as installed_version

import click

from .common import json_option, print_json

VERSION_LINE = "rabbitq %(version)s"


def line() -> str:
    """``rabbitq <version>``, the one line every way of asking prints."""
    return VERSION_LINE % {"version": installed_version("rabbitq")}


@click.command()
@json_option
def version(as_json: bool) -> None:
    """Print rabbitq's version (the same as rabbitq -V and rabbitq --version).

    Example: rabbitq version --json
    """
    if as_json:
        print_json({"version": installed_version("rabbitq")})
        return
    click.echo(line())
