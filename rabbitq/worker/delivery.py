"""One delivery as the worker reads it, straight from aiormq.

The worker consumes on aiormq's channel rather than through aio-pika's queue: aio-pika
wraps every delivery in an ``IncomingMessage`` (its properties copied one by one
through a guarded ``__setattr__``) and an extra task, which cost more per message than
the rest of rabbitq's own work (see docs/benchmarks.md). :class:`Incoming` exposes the
same fields, normalised the same way (absent ids are None, absent headers ``{}``,
absent priority 0), so the rest of the worker reads it as it read aio-pika's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import aiormq.abc


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
