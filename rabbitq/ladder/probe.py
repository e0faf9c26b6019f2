"""What the broker has of the ladder's catch-all, for ``rabbitq doctor``: whether
:data:`~.plan.DELIVER_EXCHANGE` was declared with its ``alternate-exchange`` argument,
and how many messages :data:`~.plan.UNDELIVERABLE` holds (over AMQP, each look on a
channel of its own, since a refusal closes the channel it came on)."""

from __future__ import annotations

from dataclasses import dataclass

import aio_pika
import aiormq
from aio_pika.abc import AbstractConnection

from .plan import DELIVER_EXCHANGE, UNDELIVERABLE, deliver_arguments


@dataclass(frozen=True, kw_only=True, slots=True)
class CatchAll:
    """``None``: not there (no app of the vhost has used delays yet)."""

    has_argument: bool | None
    """:data:`DELIVER_EXCHANGE` has its ``alternate-exchange`` argument."""
    held: int | None
    """Messages in :data:`UNDELIVERABLE`."""


async def probe(connection: AbstractConnection) -> CatchAll:
    """Look without creating anything: passive declares, then a redeclare of the
    existing exchange with the argument (a no-op if it has it, refused if not)."""
    has_argument: bool | None = None
    held: int | None = None
    channel = await connection.channel(publisher_confirms=False)
    try:
        await channel.declare_exchange(DELIVER_EXCHANGE, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        pass
    else:
        try:
            await channel.declare_exchange(
                DELIVER_EXCHANGE,
                aio_pika.ExchangeType.HEADERS,
                durable=True,
                arguments=deliver_arguments(),
            )
            has_argument = True
        except aiormq.exceptions.ChannelPreconditionFailed:
            has_argument = False
    if not channel.is_closed:
        await channel.close()
    channel = await connection.channel(publisher_confirms=False)
    try:
        queue = await channel.declare_queue(UNDELIVERABLE, passive=True)
        held = queue.declaration_result.message_count or 0
    except aiormq.exceptions.ChannelNotFoundEntity:
        pass
    else:
        await channel.close()
    return CatchAll(has_argument=has_argument, held=held)
