"""``python -m rabbitq``: the same as the ``rabbitq`` command."""

from .cli import main

main(prog_name="rabbitq")
