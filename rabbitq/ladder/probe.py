"""What the broker has of the ladder's catch-all, for ``rabbitq doctor``: whether
:data:`~.plan.DELIVER_EXCHANGE` was declared with its ``alternate-exchange`` argument,
how many messages :data:`~.plan.UNDELIVERABLE` holds, and for which queues (their
``rabbitq-delay-to`` header: the catch-all is shared by every app of the vhost). Over
AMQP, each look on a channel of its own, since a refusal closes the channel it came on;
the messages are read without an ack and put back when that channel closes (on quorum,
the catch-all's delivery limit is a DLQ's: reading never drops one)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage, AbstractQueue

from .plan import DELAY_TO, DELIVER_EXCHANGE, UNDELIVERABLE, deliver_arguments

READ_LIMIT = 10_000
"""At most this many of the catch-all's messages are read to say whose they are."""
IDLE = 0.5
"""Seconds without a delivery after which the read stops (the rest is held elsewhere)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CatchAll:
    """``None``: not there (no app of the vhost has used delays yet)."""

    has_argument: bool | None
    """:data:`DELIVER_EXCHANGE` has its ``alternate-exchange`` argument."""
    held: int | None
    """Messages in :data:`UNDELIVERABLE`."""
    by_queue: Mapping[str, int] = field(default_factory=dict)
    """Of those read (at most :data:`READ_LIMIT`), how many were delayed for each queue."""


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
    by_queue: Counter[str] = Counter()
    try:
        queue = await channel.declare_queue(UNDELIVERABLE, passive=True)
        held = queue.declaration_result.message_count or 0
    except aiormq.exceptions.ChannelNotFoundEntity:
        pass
    else:
        try:
            if held:
                by_queue = await _whose(channel, queue, min(held, READ_LIMIT))
        finally:
            with contextlib.suppress(Exception):  # puts back every message read
                await channel.close()
    return CatchAll(has_argument=has_argument, held=held, by_queue=dict(by_queue))


async def _whose(channel: AbstractChannel, queue: AbstractQueue, wanted: int) -> Counter[str]:
    """The ``rabbitq-delay-to`` of up to ``wanted`` messages, consumed without an ack."""
    found: Counter[str] = Counter()
    done = asyncio.Event()

    async def take(message: AbstractIncomingMessage) -> None:
        found[str((message.headers or {}).get(DELAY_TO) or "")] += 1
        if found.total() >= wanted:
            done.set()

    await channel.set_qos(prefetch_count=min(wanted, 65535))
    await queue.consume(take, no_ack=False)
    while not done.is_set():
        seen = found.total()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), IDLE)
        if found.total() == seen:  # nothing more came: others hold the rest
            break
    return found
