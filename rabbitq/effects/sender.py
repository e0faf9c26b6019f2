"""Sending a handler's follow-ups: published mandatory to the app's exchange, all in
flight at once, each confirmed (or the whole send raises a PublishError).

The send has a deadline: a broker that blocks publishers (a resource alarm) would
otherwise hold the handler's slot for as long as the alarm lasts. Past it the attempt
fails like any unconfirmed publish (the key is released and the message retried; the
follow-ups may have been stored, and keep their message ids on the next try)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aio_pika.abc import AbstractChannel

from .._amqp import properties
from .._amqp.confirm import send_confirmed
from ..errors import PublishError
from ..hooks import Hooks
from ..message import encode
from ..tracing.base import NO_SEND, NO_TRACING, Tracing
from .followups import FollowUp

FOLLOW_UP_DEADLINE = 30.0
"""Seconds a handler's follow-ups may take to be confirmed (as a retry or DLQ copy)."""


async def send_follow_ups(
    channel: AbstractChannel,
    exchange: str,
    follow_ups: Sequence[FollowUp],
    hooks: Hooks,
    tracing: Tracing = NO_TRACING,
    deadline: float = FOLLOW_UP_DEADLINE,
    cipher: Any = None,
) -> None:
    """Publish ``follow_ups`` on ``channel`` (with confirms) and wait for every confirm,
    at most ``deadline`` seconds (then :class:`~rabbitq.errors.PublishError`); with
    ``cipher`` (an encrypted app's ``rabbitq.crypto.codec.Cipher``), each body is
    encrypted as the app's publisher does.

    Called while the delivery's span is current, so each follow-up's producer span (and
    its ``traceparent``) belongs to the delivery's trace."""

    async def one(f: FollowUp) -> None:
        body = encode(f.message)
        props = properties.new(
            f.message,
            message_id=f.message_id,
            correlation_id=f.correlation_id,
            headers=f.headers,
        )
        if cipher is not None:
            body = cipher.seal_properties(body, props, f.type_name)
        span = NO_SEND
        if tracing.enabled:  # writes traceparent into the headers
            assert props.headers is not None and props.message_id is not None
            span = tracing.publish(
                props.headers,
                exchange=exchange,
                routing_key=f.type_name,
                type_name=f.type_name,
                message_id=props.message_id,
                correlation_id=props.correlation_id,
                body_size=len(body),
            )
        try:
            await send_confirmed(channel, exchange, f.type_name, body, props)
        except BaseException as exc:
            span.end(exc)
            raise
        span.end()
        hooks.published(exchange, f.type_name)

    try:
        async with asyncio.timeout(deadline):
            await asyncio.gather(*(one(f) for f in follow_ups))
    except TimeoutError:
        raise PublishError(
            f"{len(follow_ups)} follow-up(s) not confirmed within {deadline:g}s "
            "(is the broker blocking publishers? see rabbitq_connection_blocked)"
        ) from None
