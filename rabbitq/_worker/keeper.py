"""The worker owns its topology and its channel for copies.

When a queue of the app goes away under a running worker (an operator deleted it), the
broker cancels the consumer or returns a copy as unroutable; :meth:`Keeper.redeclare`
declares the whole topology again (once, however many copies noticed at the same
time), logs it and reports ``topology_redeclared``.

A quorum topology is declared again only :data:`QUORUM_REDECLARE_WAIT` seconds after
the worker noticed: RabbitMQ 3.10.8 keeps the consumers of a deleted quorum queue that
it has not cancelled yet when a queue of that name is declared again within
milliseconds, sends them no ``basic.cancel``, and they hold the new queue's messages
unacked and never delivered (measured: 5 of 5 times at once, 0 of 6 after 0.1 s or
more). Those consumers are other processes' (another worker, a DLQ reader), so the
wait is the only cure on our side. Nothing is lost meanwhile: quorum queues
dead-letter at-least-once (a retry expiring into the missing main queue is kept and
sent again), and a copy waits for the declare. Classic topologies are declared again
at once: their dead-lettering drops what has nowhere to go. :meth:`Keeper.renew_copy_channel`
replaces the channel the worker publishes its copies on (see ``copies.py`` for why).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection

from .._amqp.topology import Topology, declare
from ..hooks import CONSUMER_CANCELLED, Hooks
from .copies import COPY_DEADLINE, close_later

log = logging.getLogger("rabbitq.worker")

QUORUM_REDECLARE_WAIT = 0.5
"""Seconds between noticing that a queue of a quorum topology went away and declaring
it again (see the module docstring)."""
HELD_RETRIES = (
    "retries whose delay ran out while %r was missing (at least %gs) are held by RabbitMQ, "
    "not lost: it sends them again about 3 minutes later (quorum at-least-once "
    "dead-lettering; a policy change on the retry queue sends them at once); "
    "rabbitq_dead_letters_held_by_broker counts them where the management API answers"
)


class Keeper:
    """Declares ``topology`` again on the channel ``declaring()``; opens and renews the
    copy channel on ``connection()``."""

    def __init__(
        self,
        topology: Topology,
        hooks: Hooks,
        *,
        declaring: Callable[[], AbstractRobustChannel | None],
        connection: Callable[[], AbstractRobustConnection | None],
    ) -> None:
        self.topology = topology
        self._hooks = hooks
        self._declaring = declaring
        self._connection = connection
        self._lock = asyncio.Lock()
        self.redeclared = 0
        """Times a queue went away and the topology was declared again."""
        self.copy_channel: AbstractRobustChannel | None = None
        quorum = any(q.arguments.get("x-queue-type") == "quorum" for q in topology.queues)
        self.redeclare_wait = QUORUM_REDECLARE_WAIT if quorum else 0.0

    async def redeclare(self, reason: str) -> None:
        """Declare the app's topology again: one of its queues went away."""
        seen = self.redeclared
        async with self._lock:
            if self.redeclared != seen:
                return  # another task just did it
            if self.redeclare_wait:  # the broker cancels the deleted queue's consumers
                await asyncio.sleep(self.redeclare_wait)
            channel = self._declaring()
            assert channel is not None
            await declare(channel, self.topology)
            self.redeclared += 1
        queue = self.topology.main.name
        log.warning(
            "declared the queues of %r again (%s: one of them had gone away)",
            queue,
            reason.replace("_", " "),
        )
        if self.redeclare_wait and reason == CONSUMER_CANCELLED:
            log.warning(HELD_RETRIES, queue, self.redeclare_wait)
        self._hooks.topology_redeclared(queue, reason)

    async def open_copy_channel(self) -> None:
        """Open the channel for copies (confirms, returns raise)."""
        connection = self._connection()
        assert connection is not None
        self.copy_channel = await connection.channel(publisher_confirms=True, on_return_raises=True)

    async def renew_copy_channel(self) -> None:
        """A new channel for copies; the old one closes once the copies in flight on it
        have had their deadline."""
        connection = self._connection()
        if connection is None or connection.is_closed:
            return
        old = self.copy_channel
        await self.open_copy_channel()
        if old is not None:
            close_later(old, COPY_DEADLINE)
