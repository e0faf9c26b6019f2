"""The ``rabbitq`` command: parse arguments, set up logging, call library functions.

Every command takes ``--url`` (default ``$RABBITQ_URL``), never prints a password, and
turns a failure into one line on stderr and a non-zero exit. Each command group lives
in its own module and is registered below with one line.
"""

from __future__ import annotations

import click

from ..ops import logs

# Modules, not their commands: ``rabbitq.cli.dlq`` stays the module (tests patch it).
from . import demo, dlq, doctor, effects, publish, queues, worker
from .common import Command
from .console import console


@click.group(cls=Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rabbitq")
def main() -> None:
    """rabbitq: RabbitMQ consumers that never lose work.

    Run a worker for an app (rabbitq worker myservice:app), try the whole flow with
    rabbitq demo, publish a message by hand, declare the queues, or look at their depths;
    rabbitq dlq lists, shows, replays, exports, imports and purges dead-lettered
    messages. Every command takes --url and -h/--help.
    """
    logs.configure(level="WARNING")


main.add_command(worker.worker)
main.add_command(publish.publish)
main.add_command(queues.topology)
main.add_command(queues.stats)
main.add_command(demo.demo)
main.add_command(dlq.dlq)
main.add_command(effects.effects)
main.add_command(effects.outbox)
main.add_command(doctor.doctor)
main.add_command(console)
