"""The ``rabbitq`` command: parse arguments, set up logging, call library functions.

Every command takes ``--url`` (default ``$RABBITQ_URL``), never prints a password, and
turns a failure into one line on stderr and a non-zero exit. Each command group lives
in its own module and is registered in :func:`_commands` with one line; the modules are
imported on the first look at the commands, so ``rabbitq --version`` imports none of
them (nor aio-pika, pydantic or the worker).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping

import click

from . import version
from .common import Command


def _commands() -> list[click.Command]:
    """Every command of the root, its modules imported (``rabbitq.cli.dlq`` stays the
    module: tests patch it)."""

    def of(module: str, name: str) -> click.Command:
        command: click.Command = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        return command

    outbox = of("effects", "outbox")
    assert isinstance(outbox, click.Group)
    for name in ("list_rows", "retry_rows", "discard_rows"):
        outbox.add_command(of("outbox_rows", name))
    return [
        of("worker", "worker"),
        of("publish", "publish"),
        of("queues", "topology"),
        of("queues", "stats"),
        of("purge", "purge"),
        of("demo", "demo"),
        of("dlq", "dlq"),
        of("effects", "effects"),
        outbox,
        of("doctor", "doctor"),
        of("status", "status"),
        of("cancel", "cancel"),
        of("keys", "keys"),
        of("console", "console"),
        version.version,
        of("blobs", "blobs"),
        of("schedule", "scheduler"),
        of("schedule", "schedule"),
    ]


class _Commands(MutableMapping[str, click.Command]):
    """The root's commands by name, made by ``load`` on the first look."""

    def __init__(self, load: Callable[[], list[click.Command]]) -> None:
        self._load: Callable[[], list[click.Command]] | None = load
        self._by_name: dict[str, click.Command] = {}

    def _loaded(self) -> dict[str, click.Command]:
        if self._load is not None:
            load, self._load = self._load, None
            self._by_name.update((c.name or "", c) for c in load())
        return self._by_name

    def __getitem__(self, name: str) -> click.Command:
        return self._loaded()[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded()[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())


@click.group(
    cls=Command,
    commands=_Commands(_commands),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(None, "-V", "--version", package_name="rabbitq", message=version.VERSION_LINE)
def main() -> None:
    """rabbitq: RabbitMQ consumers that never lose work.

    Run a worker for an app (rabbitq worker myservice:app), try the whole flow with
    rabbitq demo, publish a message by hand, declare the queues, or look at their depths;
    rabbitq dlq lists, shows, replays, exports, imports and purges dead-lettered
    messages. Every command takes -h/--help, and --url if it talks to a broker. Exit
    status: 0 done, 1 it could not be done, 2 the command line is wrong.
    """
    from .._ops import logs

    logs.configure(level="WARNING")
