"""One delivery as the worker reads it, straight from aiormq.

The worker consumes on aiormq's channel rather than through aio-pika's queue: aio-pika
wraps every delivery in an ``IncomingMessage`` (its properties copied one by one
through a guarded ``__setattr__``) and an extra task, which cost more per message than
the rest of rabbitq's own work (see docs/benchmarks.md). :class:`Incoming` exposes the
same fields, normalised the same way (absent ids are None, absent headers ``{}``,
absent priority 0), so the rest of the worker reads it as it read aio-pika's.

:func:`deliver_directly` saves aiormq's own task per delivery: aiormq runs every
consumer callback in a task of its own (kept in two future stores, with two done
callbacks), only for the worker to start its own task from it at once. The worker's
consumer is called as its frames are read instead, and starts its one task there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import aiormq.abc

log = logging.getLogger("rabbitq.worker")

OnDelivery = Callable[[aiormq.abc.DeliveredMessage], None]


class Incoming:
    """The fields of a delivery that the worker reads, its tag and its channel."""

    __slots__ = (
        "app_id",
        "body",
        "channel",
        "content_encoding",
        "content_type",
        "correlation_id",
        "delivery_tag",
        "exchange",
        "headers",
        "message_id",
        "priority",
        "redelivered",
        "reply_to",
        "routing_key",
        "timestamp",
        "type",
    )

    def __init__(self, message: aiormq.abc.DeliveredMessage) -> None:
        props = message.header.properties
        frame: Any = message.delivery  # a Basic.Deliver for a consumer
        self.channel: aiormq.abc.AbstractChannel = message.channel
        self.body: bytes = message.body
        self.headers: dict[str, Any] = props.headers or {}
        self.content_type: str | None = props.content_type
        self.content_encoding: str | None = props.content_encoding
        self.priority: int = props.priority or 0
        self.correlation_id: str | None = props.correlation_id or None
        self.reply_to: str | None = props.reply_to or None
        self.message_id: str | None = props.message_id or None
        self.timestamp: datetime | None = props.timestamp  # pamqp decodes it already
        self.type: str | None = props.message_type or None
        self.app_id: str | None = props.app_id or None
        self.delivery_tag: int = frame.delivery_tag
        self.redelivered: bool = bool(frame.redelivered)
        self.exchange: str | None = frame.exchange
        self.routing_key: str | None = frame.routing_key

    def __repr__(self) -> str:
        return f"<Incoming {self.delivery_tag} {self.type or self.routing_key!r}>"


def deliver_directly(channel: Any, consumer_tag: str, on_delivery: OnDelivery) -> bool:
    """Have aiormq's ``channel`` call ``on_delivery`` for ``consumer_tag``'s deliveries
    as its reader reads them, without a task per delivery (aiormq 7's ``_reader`` calls
    ``self._on_deliver_frame``; tests/worker/test_direct_delivery.py guards it).

    ``on_delivery`` must not block: the worker's starts its own task and returns. Other
    consumers of the channel keep aiormq's way. False (nothing changed, aiormq's way
    still works) when the channel lacks the methods this reads frames with.
    """
    read_header = getattr(channel, "_Channel__get_content_header", None)
    read_content = getattr(channel, "_read_content", None)
    if read_header is None or read_content is None:
        return False
    routes: dict[str, OnDelivery] | None = getattr(channel, "_rabbitq_direct", None)
    if routes is None:
        original = channel._on_deliver_frame
        routes = {}

        async def on_deliver_frame(frame: Any) -> None:
            callback = routes.get(frame.consumer_tag)
            if callback is None:
                await original(frame)
                return
            # What aiormq's own _on_deliver_frame reads, then the call without a task.
            message = await read_content(frame, await read_header())
            try:
                callback(message)
            except Exception:  # as aiormq logs a failed consumer task
                log.exception("consumer callback failed")

        channel._on_deliver_frame = on_deliver_frame
        channel._rabbitq_direct = routes
    routes[consumer_tag] = on_delivery
    return True
