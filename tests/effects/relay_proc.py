"""A relay in a process of its own, for the crash tests: ``python -m tests.effects.relay_proc
DSN PREFIX AMQP_URL EXCHANGE [--die-after-publish]``. With ``--die-after-publish`` it
kills itself with SIGKILL after its first batch was confirmed, before marking it sent."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from rabbitq import App
from rabbitq.effects import Outbox
from rabbitq.effects.relay import Relay


def main() -> None:
    dsn, prefix, url, exchange = sys.argv[1:5]
    die = "--die-after-publish" in sys.argv
    app = App(queue=f"{exchange}.unused", exchange=exchange, url=url)
    outbox = Outbox(dsn, app=app, prefix=prefix, batch=50, poll_interval=0.05)

    def after_batch(sent: int) -> None:
        if die and sent:
            os.kill(os.getpid(), signal.SIGKILL)

    relay = Relay(outbox, on_batch=after_batch)
    loop = asyncio.new_event_loop()
    loop.add_signal_handler(signal.SIGTERM, relay.stop)
    loop.run_until_complete(relay.run())


if __name__ == "__main__":
    main()
