"""The ``rabbitq`` command: parse arguments, set up logging, call library functions.

Every command takes ``--url`` (default ``$RABBITQ_URL``), never prints a password, and
turns a failure into one line on stderr and a non-zero exit. Each command group lives
in its own module and is registered below with one line.
"""

from __future__ import annotations

import click

from .._ops import logs

# Modules, not their commands: ``rabbitq.cli.dlq`` stays the module (tests patch it).
from . import (
    blobs,
    cancel,
    demo,
    dlq,
    doctor,
    effects,
    keys,
    outbox_rows,
    publish,
    purge,
    queues,
    schedule,
    status,
    version,
    worker,
)
from .common import Command
from .console import console


@click.group(cls=Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(None, "-V", "--version", package_name="rabbitq", message=version.VERSION_LINE)
def main() -> None:
    """rabbitq: RabbitMQ consumers that never lose work.

    Run a worker for an app (rabbitq worker myservice:app), try the whole flow with
    rabbitq demo, publish a message by hand, declare the queues, or look at their depths;
    rabbitq dlq lists, shows, replays, exports, imports and purges dead-lettered
    messages. Every command takes -h/--help, and --url if it talks to a broker. Exit
    status: 0 done, 1 it could not be done, 2 the command line is wrong.
    """
    logs.configure(level="WARNING")


main.add_command(worker.worker)
main.add_command(publish.publish)
main.add_command(queues.topology)
main.add_command(queues.stats)
main.add_command(purge.purge)
main.add_command(demo.demo)
main.add_command(dlq.dlq)
main.add_command(effects.effects)
main.add_command(effects.outbox)
effects.outbox.add_command(outbox_rows.list_rows)
effects.outbox.add_command(outbox_rows.retry_rows)
effects.outbox.add_command(outbox_rows.discard_rows)
main.add_command(doctor.doctor)
main.add_command(status.status)
main.add_command(cancel.cancel)
main.add_command(keys.keys)
main.add_command(console)
main.add_command(version.version)
main.add_command(blobs.blobs)
main.add_command(schedule.scheduler)
main.add_command(schedule.schedule)
