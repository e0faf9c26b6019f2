"""A tick on the wire (I/O): its messages and the progress record in one AMQP
transaction, and the progress records read back at takeover.

The channel is in transaction mode (``tx.select``): the broker routes what was
published on it, and applies the acks, only at ``tx.commit``, all together. A client
killed before its commit reached the broker leaves nothing; one killed after leaves
everything. A transaction carries no publisher confirm and no ``mandatory`` return:
``tx.commit-ok`` comes once the queues have taken the messages.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiormq
from pamqp.commands import Basic

from .._amqp import properties
from ..message import CONTENT_TYPE, Message, encode
from . import plan
from .spec import tick_id

COMMIT_TIMEOUT = 10.0  # a tick's transaction must commit within this, or the leader steps down
SCHEDULE_HEADER = "rabbitq-schedule"
TICK_HEADER = "rabbitq-tick"


@dataclass(frozen=True, kw_only=True, slots=True)
class Send:
    """Message ``index`` of schedule ``schedule``'s tick at ``tick``."""

    schedule: str
    tick: datetime
    index: int
    message: Message


@dataclass(kw_only=True, slots=True)
class Found:
    """Progress records read at takeover, and their delivery tags (acked in the first
    commit)."""

    records: list[plan.Progress] = field(default_factory=list)
    tags: list[int] = field(default_factory=list)


def messages_of(result: object) -> list[Message]:
    """A schedule function's return value as a list of messages (None: none)."""
    if result is None:
        return []
    if isinstance(result, Message):
        return [result]
    if isinstance(result, (list, tuple)) and all(isinstance(m, Message) for m in result):
        return list(result)
    raise TypeError(
        f"a schedule function returns a Message, a list of them or None, not {result!r}"
    )


async def read_progress(tx: aiormq.abc.AbstractChannel, queue: str) -> Found:
    """Get every record in the progress queue, unacked (held until the first commit)."""
    found = Found()
    while True:
        message = await tx.basic_get(queue, no_ack=False)
        if not isinstance(message.delivery, Basic.GetOk):
            return found
        assert message.delivery.delivery_tag is not None
        found.tags.append(message.delivery.delivery_tag)
        record = plan.decode_progress(message.body)
        if record is not None:
            found.records.append(record)


async def commit(
    tx: aiormq.abc.AbstractChannel,
    *,
    exchange: str,
    progress_queue: str,
    sends: list[Send],
    record: plan.Progress,
    acks: list[int],
    cipher: Any = None,
) -> None:
    """Publish ``sends`` to ``exchange`` and ``record`` to ``progress_queue``, ack
    ``acks``, and commit; raise if the commit fails or takes over
    :data:`COMMIT_TIMEOUT` (then the tick may or may not have gone out). ``cipher``: an
    encrypted app's (``rabbitq.crypto.codec.Cipher``), each message's body encrypted."""
    for send in sends:
        props = properties.new(
            send.message,
            message_id=tick_id(send.schedule, send.tick, send.index),
            headers={SCHEDULE_HEADER: send.schedule, TICK_HEADER: send.tick.isoformat()},
        )
        body = encode(send.message)
        if cipher is not None:
            body = cipher.seal_properties(body, props, send.message.type_name())
        await tx.basic_publish(
            body,
            exchange=exchange,
            routing_key=send.message.type_name(),
            properties=props,
        )
    await tx.basic_publish(
        plan.encode_progress(record),
        exchange="",
        routing_key=progress_queue,
        properties=Basic.Properties(
            content_type=CONTENT_TYPE,
            delivery_mode=properties.PERSISTENT,
            message_type=plan.PROGRESS_TYPE,
            timestamp=record.written,
        ),
    )
    for tag in acks:
        await tx.basic_ack(tag)
    async with asyncio.timeout(COMMIT_TIMEOUT):
        await tx.tx_commit()
