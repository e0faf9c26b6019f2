"""``rabbitq version``: the installed version, as ``rabbitq -V`` and ``--version`` print it."""

from __future__ import annotations

from importlib.metadata import version as installed_version

import click

VERSION_LINE = "rabbitq %(version)s"


def line() -> str:
    """``rabbitq <version>``, the one line every way of asking prints."""
    return VERSION_LINE % {"version": installed_version("rabbitq")}


@click.command()
def version() -> None:
    """Print rabbitq's version (the same as rabbitq -V and rabbitq --version).

    Example: rabbitq version
    """
    click.echo(line())
