"""The one way rabbitq publishes: mandatory, with a publisher confirm awaited.

:func:`send_confirmed` is used by the publisher, the worker's retry and DLQ copies,
the DLQ tool's replay and import, and the demo. Every failure becomes one of rabbitq's
:class:`~rabbitq.errors.PublishError` subclasses, mapped in one place
(:func:`publish_error`), as httpx maps its transport's exceptions.

aiormq cancels the futures of a connection it closes (a confirm, a drain), e.g. one
closed as stuck ("no frames were received in 48 seconds"): the publish then sees a
``CancelledError`` although no one cancelled it. That one is a PublishInterrupted too;
a ``CancelledError`` is passed on only when the publishing task itself was cancelled
(:func:`~rabbitq._amqp.cancel.cancelled_by_caller`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import aiormq
from aio_pika.abc import AbstractChannel
from pamqp.commands import Basic

from ..errors import PublishError, PublishInterrupted, PublishNacked, Unroutable
from .cancel import cancelled_by_caller
from .inflight import one_in_flight

# Waits between attempts of a publisher with ``retry_for``: doubling, capped.
RETRY_FIRST_WAIT = 0.1
RETRY_MAX_WAIT = 2.0
# What a publish on a channel can raise, all turned into a PublishError.
FAILURES = (aiormq.exceptions.AMQPError, ConnectionError, OSError, RuntimeError)


async def send_confirmed(
    channel: AbstractChannel,
    exchange: str,
    routing_key: str,
    body: bytes,
    properties: Basic.Properties,
) -> None:
    """Publish mandatory on ``channel`` (opened with confirms and ``on_return_raises``)
    and wait for the confirm, or raise a PublishError."""
    try:
        if channel.is_closed:  # as aio-pika does: fail now rather than wait for a reconnect
            raise aiormq.exceptions.ChannelInvalidStateError(f"{channel!r} closed")
        underlay = await channel.get_underlay_channel()
        # aiormq matches a return to its publish by message_id: one per id in flight
        async with one_in_flight(underlay, properties.message_id):
            # aiormq's Channel takes ``wait`` (6.x and 7.x); its abstract class omits it.
            await underlay.basic_publish(  # type: ignore[call-arg]
                body,
                exchange=exchange,
                routing_key=routing_key,
                properties=properties,
                mandatory=True,
                # Queue the frame and wait for the confirm only, not also for the frame to
                # be written out while holding the channel's lock: the next publish need
                # not wait a turn of the writer (the write queue is bounded: back-pressure
                # stays). The confirm is the proof, as before.
                wait=False,
            )
    except FAILURES as exc:
        raise publish_error(exc, exchange, routing_key) from exc
    except asyncio.CancelledError as exc:
        if cancelled_by_caller():
            raise
        raise publish_error(exc, exchange, routing_key) from exc


def publish_error(exc: BaseException, exchange: str, routing_key: str) -> PublishError:
    """aiormq's or the connection's error as one of rabbitq's PublishError subclasses."""
    where = f"exchange {exchange or '(default)'!r} with routing key {routing_key!r}"
    if isinstance(exc, aiormq.exceptions.PublishError):  # returned: the broker could not route it
        return Unroutable(f"no queue is bound to {where}; nothing was stored")
    if isinstance(exc, aiormq.exceptions.DeliveryError):
        return PublishNacked(f"the broker refused the message sent to {where}")
    if isinstance(exc, aiormq.exceptions.ChannelInvalidStateError):  # checked before sending
        return PublishInterrupted(
            f"not connected to RabbitMQ: nothing was sent to {where} ({exc or 'channel closed'})"
        )
    return PublishInterrupted(
        f"the connection closed before the broker confirmed the message sent to {where} "
        f"({type(exc).__name__}); it may or may not have been stored"
    )


def no_confirm(seconds: float) -> PublishInterrupted:
    """A publish without ``retry_for`` that had no confirm within its ``seconds``."""
    return PublishInterrupted(
        f"no confirm within {seconds:g}s (is the broker blocking publishers? a memory or"
        " disk alarm); it may or may not have been stored"
    )


def error_kind(exc: PublishError) -> str:
    """A bounded label for metrics: unroutable, nacked or interrupted."""
    if isinstance(exc, Unroutable):
        return "unroutable"
    if isinstance(exc, PublishNacked):
        return "nacked"
    return "interrupted"


def retry_waits(first: float = RETRY_FIRST_WAIT, cap: float = RETRY_MAX_WAIT) -> Iterator[float]:
    """The waits between attempts: 0.1, 0.2, 0.4, ... seconds, at most ``cap`` each."""
    wait = first
    while True:
        yield wait
        wait = min(wait * 2, cap)


async def within(seconds: float, send: Callable[[], Awaitable[None]]) -> None:
    """``send()`` (the same ``message_id``) until ``seconds`` have passed, again
    after an interruption (the robust connection reconnects meanwhile) or a nack
    (not stored: a quorum queue without a reachable leader, a full queue; it may
    pass); an unroutable message is not retried: no queue is bound for it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    attempts = 0
    for wait in retry_waits():
        attempts += 1
        try:
            async with asyncio.timeout(max(0.0, deadline - loop.time())):
                await send()
            return
        except (PublishInterrupted, PublishNacked) as exc:
            last: PublishError = exc
        except TimeoutError:
            last = PublishInterrupted("no confirm in time; it may or may not have been stored")
        if loop.time() + wait >= deadline:
            gave_up = f"not confirmed within retry_for={seconds:g}s ({attempts} attempt(s))"
            raise type(last)(f"{gave_up}; last: {last}")
        await asyncio.sleep(wait)
