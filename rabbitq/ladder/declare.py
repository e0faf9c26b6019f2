"""Declaring the delay ladder and binding a queue to it: the ladder's only I/O.

Every call is idempotent: declaring what exists with the same arguments is a no-op, so
the worker, ``rabbitq topology`` and a publisher's first delayed message may all do it.
On a robust channel aio-pika declares all of it again after a reconnect.
"""

from __future__ import annotations

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange

from .plan import DELIVER_EXCHANGE, Ladder, destination_arguments


async def declare(channel: AbstractChannel, ladder: Ladder) -> None:
    """Declare the delivering exchange, every level's exchange and queue, and the
    bindings between them (durable, all of them)."""
    exchanges: dict[str, AbstractExchange] = {
        DELIVER_EXCHANGE: await channel.declare_exchange(
            DELIVER_EXCHANGE, aio_pika.ExchangeType.HEADERS, durable=True
        )
    }
    for name in ladder.exchanges:
        exchanges[name] = await channel.declare_exchange(
            name, aio_pika.ExchangeType.TOPIC, durable=True
        )
    queues = {
        level.name: await channel.declare_queue(
            level.name, durable=True, arguments=dict(level.arguments)
        )
        for level in ladder.levels
    }
    for b in ladder.bindings:
        if b.to_exchange:
            await exchanges[b.destination].bind(exchanges[b.source], routing_key=b.routing_key)
        else:
            await queues[b.destination].bind(exchanges[b.source], routing_key=b.routing_key)


async def bind_destination(channel: AbstractChannel, queue: str) -> None:
    """Bind ``queue`` (which must exist) to the delivering exchange, on its name alone.

    A queue that does not exist closes ``channel`` (``ChannelNotFoundEntity``).
    """
    await channel.declare_exchange(DELIVER_EXCHANGE, aio_pika.ExchangeType.HEADERS, durable=True)
    target = await channel.get_queue(queue, ensure=False)
    await target.bind(DELIVER_EXCHANGE, arguments=destination_arguments(queue))
