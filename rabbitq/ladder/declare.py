"""Declaring the delay ladder and binding a queue to it: the ladder's only I/O.

Every call is idempotent: declaring what exists with the same arguments is a no-op, so
the worker, ``rabbitq topology`` and a publisher's first delayed message may all do it.
On a robust channel aio-pika declares all of it again after a reconnect.

Two objects may already exist with other arguments, and are then taken as they are
rather than refused: :data:`~.plan.DELIVER_EXCHANGE` declared by a rabbitq without its
``alternate-exchange`` (an exchange's arguments cannot change; ``rabbitq doctor`` tells
how to add it by policy), and :data:`~.plan.UNDELIVERABLE`'s queue declared first by a
ladder of the other queue type. Each is tried on a channel of its own first, since a
refusal (``PRECONDITION_FAILED``) closes the channel it came on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractQueue

from .plan import (
    DELIVER_EXCHANGE,
    UNDELIVERABLE,
    Ladder,
    QueueType,
    deliver_arguments,
    destination_arguments,
    undeliverable_arguments,
)


async def _accepted(
    channel: AbstractChannel, attempt: Callable[[aiormq.abc.AbstractChannel], Awaitable[Any]]
) -> bool:
    """Whether ``attempt`` succeeds on a probe channel of ``channel``'s connection (False
    on ``PRECONDITION_FAILED``), so that a refusal leaves ``channel`` open."""
    underlay = await channel.get_underlay_channel()
    probe = await underlay.connection.channel()
    try:
        await attempt(probe)
    except aiormq.exceptions.ChannelPreconditionFailed:
        return False
    finally:
        if not probe.is_closed:
            await probe.close()
    return True


async def declare_deliver(channel: AbstractChannel) -> AbstractExchange:
    """Declare :data:`DELIVER_EXCHANGE` with its alternate exchange; one that exists
    without it is used as it is."""
    arguments = deliver_arguments()

    async def attempt(probe: aiormq.abc.AbstractChannel) -> Any:
        return await probe.exchange_declare(
            DELIVER_EXCHANGE, exchange_type="headers", durable=True, arguments=arguments
        )

    if await _accepted(channel, attempt):
        return await channel.declare_exchange(
            DELIVER_EXCHANGE, aio_pika.ExchangeType.HEADERS, durable=True, arguments=arguments
        )
    return await channel.get_exchange(DELIVER_EXCHANGE, ensure=True)


async def declare_undeliverable(channel: AbstractChannel, queue_type: QueueType) -> AbstractQueue:
    """Declare :data:`UNDELIVERABLE`: a fanout exchange and a durable queue bound to it
    (of ``queue_type``, unless it exists as the other type)."""
    exchange = await channel.declare_exchange(
        UNDELIVERABLE, aio_pika.ExchangeType.FANOUT, durable=True
    )
    arguments = undeliverable_arguments(queue_type)

    async def attempt(probe: aiormq.abc.AbstractChannel) -> Any:
        return await probe.queue_declare(UNDELIVERABLE, durable=True, arguments=arguments)

    if await _accepted(channel, attempt):
        queue = await channel.declare_queue(UNDELIVERABLE, durable=True, arguments=arguments)
    else:
        queue = await channel.get_queue(UNDELIVERABLE, ensure=True)
    await queue.bind(exchange)
    return queue


async def declare(channel: AbstractChannel, ladder: Ladder) -> None:
    """Declare the catch-all for undeliverable messages, the delivering exchange, every
    level's exchange and queue, and the bindings between them (durable, all of them)."""
    await declare_undeliverable(channel, ladder.queue_type)
    exchanges: dict[str, AbstractExchange] = {DELIVER_EXCHANGE: await declare_deliver(channel)}
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
    await channel.get_exchange(DELIVER_EXCHANGE, ensure=True)
    target = await channel.get_queue(queue, ensure=False)
    await target.bind(DELIVER_EXCHANGE, arguments=destination_arguments(queue))
