"""Publishing typed messages with publisher confirms, ``mandatory`` and persistence.

``publish()`` returns only after the broker confirmed the message; every way it can
fail is a :class:`~rabbitq.errors.PublishError`. It publishes through
:func:`rabbitq._amqp.confirm.send_confirmed`, as the worker's copies and the DLQ tool
do, with the properties of :func:`rabbitq._amqp.properties.new`. It takes what it needs
from an app through the small :class:`PublishingApp` protocol, so it does not import
:mod:`rabbitq.app` (which imports it).

By default a publish fails at once when the connection is down. A publisher opened
with ``retry_for=S`` keeps trying (connecting, and each unconfirmed publish) with
backoff for at most ``S`` seconds while the robust connection reconnects, then raises.
A retried publish may store the message twice (same ``message_id``) if the broker
stored it but its confirm was lost: at-least-once, like everything else.

A delayed publish (``delay=`` or ``at=``) goes into the delay ladder
(:mod:`rabbitq.ladder`, docs/delays.md) and reaches this app's queue only, when due.
The publisher's first delayed publish declares the ladder and binds the app's queue to
it (the queue must exist: a worker or ``rabbitq topology`` declared it).

A publish never raises a ``CancelledError`` it did not receive: a confirm that aiormq
cancels because it closed the connection (e.g. as stuck, "no frames were received") is
a :class:`~rabbitq.errors.PublishInterrupted` ("it may or may not have been stored"),
retried within ``retry_for``. Leaving the ``async with`` waits at most ``timeout`` (and
5 s) for the broker to answer the close.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Protocol

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractRobustConnection

from ..errors import (
    ConfigurationError,
    PublishError,
    PublishInterrupted,
    Unroutable,
)
from ..hooks import Hooks, combine
from ..ladder import declare as ladder_declare
from ..ladder import plan as ladder
from ..message import Message, Publishable
from ..settings import TLS
from ..tracing.base import NO_SEND, Tracing
from . import headers as h
from . import partitions, properties
from .confirm import FAILURES, error_kind, no_confirm, send_confirmed, within
from .connection import connect_within
from .lanes import check_priority
from .outgoing import Outgoing, PublishStep, compose, outgoing
from .pipeline import key_function, pipelined
from .topology import Topology, mismatch_from_error

DEFAULT_WINDOW = 512
# How long a publish without ``retry_for`` waits for its confirm (a broker under a
# resource alarm blocks publishers and would otherwise keep it waiting forever).
DEFAULT_TIMEOUT = 60.0
CLOSE_TIMEOUT = 5.0
NOT_OPEN = "the publisher is not open: use 'async with app.publisher()'"


class PublishingApp(Protocol):
    """What a :class:`Publisher` needs from an app (:class:`rabbitq.App` has it)."""

    @property
    def exchange(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def queue_type(self) -> ladder.QueueType: ...
    def topology(self) -> Topology: ...
    @property
    def tracing(self) -> Tracing: ...
    @property
    def publish_steps(self) -> tuple[PublishStep, ...]: ...
    loaded_as: str | None


class Publisher:
    """Publishes an app's messages. Use it as ``async with app.publisher() as pub``.

    Pass ``connection`` to share one you already have; otherwise the publisher opens
    its own robust connection and closes it on exit. ``retry_for`` (seconds, default
    None: fail at once) bounds how long connecting and each publish keep retrying while
    the broker is unreachable; past it they raise, never report an unconfirmed success.
    ``timeout`` (seconds, default 60) bounds how long one publish without ``retry_for``
    waits for its confirm, e.g. while the broker blocks publishers under a memory alarm:
    past it, :class:`~rabbitq.PublishInterrupted` (the message may have been stored).
    """

    def __init__(
        self,
        app: PublishingApp,
        *,
        url: str,
        connection: AbstractRobustConnection | None = None,
        hooks: Hooks | list[Hooks] | None = None,
        tls: TLS | None = None,
        retry_for: float | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if not timeout > 0:
            raise ConfigurationError(f"timeout must be positive seconds, not {timeout!r}")
        self._timeout = timeout
        if retry_for is not None and not retry_for > 0:
            raise ConfigurationError(
                f"retry_for must be positive seconds or None, not {retry_for!r}"
            )
        self._app = app
        self._retry_for = retry_for
        self._url, self._tls = url, tls
        self._connection = connection
        self._owns_connection = connection is None
        self._hooks = combine(hooks)
        self._channel: AbstractChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._ladder_ready = False  # declared, and the app's queue bound to it
        self._ladder_lock = asyncio.Lock()

    @property
    def app(self) -> Any:
        """The app this publisher publishes for."""
        return self._app

    @property
    def is_open(self) -> bool:  # after open(), before a close; its channel not closed
        return self._channel is not None and not self._channel.is_closed

    async def __aenter__(self) -> Publisher:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect (unless given a connection) and declare the app's exchange."""
        if self._connection is None:
            self._connection = await self._connect()
        self._channel = await self._connection.channel(
            publisher_confirms=True, on_return_raises=True
        )
        self._exchange = await self._channel.declare_exchange(
            self._app.exchange, aio_pika.ExchangeType.TOPIC, durable=True
        )

    async def _connect(self) -> AbstractRobustConnection:
        name = f"rabbitq publisher {self._app.queue}"
        return await connect_within(self._url, self._retry_for, name=name, tls=self._tls)

    async def close(self) -> None:
        """Close the connection if the publisher opened it (which closes its channel),
        else the channel, waiting at most ``timeout`` (and 5 s) for the broker's answer:
        a broker that blocks publishers (an alarm) does not read our close."""
        await self._app.tracing.flush()  # status records of this publisher's messages
        channel, self._channel, self._exchange = self._channel, None, None
        limit = min(CLOSE_TIMEOUT, self._timeout)
        if self._owns_connection and self._connection is not None:
            connection, self._connection = self._connection, None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    await connection.close()
        elif channel is not None and not channel.is_closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    await channel.close()

    def _open_channel(self) -> AbstractChannel:
        if self._exchange is None or self._channel is None:
            raise PublishInterrupted(NOT_OPEN)
        return self._channel

    async def _declare_ladder(self) -> None:
        """Declare the delay ladder and bind the app's queue (and its priority lanes) to
        it, once per publisher, on a channel of its own (a missing queue closes the
        channel it was bound on)."""
        async with self._ladder_lock:
            if self._ladder_ready:
                return
            if self._connection is None:
                raise PublishInterrupted(NOT_OPEN)
            queue = self._app.queue
            try:
                async with asyncio.timeout(self._timeout):
                    channel = await self._connection.channel(publisher_confirms=False)
                    try:
                        await ladder_declare.declare(channel, ladder.ladder(self._app.queue_type))
                        lanes = [lane.name for lane in self._app.topology().lanes]  # priorities
                        for queue in (self._app.queue, *lanes):
                            await ladder_declare.bind_destination(channel, queue)
                    finally:
                        if not channel.is_closed:
                            await channel.close()
            except aiormq.exceptions.ChannelNotFoundEntity:
                raise Unroutable(
                    f"queue {queue!r} does not exist, so a delayed message would have nowhere "
                    "to go when due: start its worker or run 'rabbitq topology MODULE:APP'"
                ) from None
            except aiormq.exceptions.ChannelPreconditionFailed as exc:
                raise mismatch_from_error(exc) or exc from exc
            except TimeoutError:
                raise PublishInterrupted(
                    f"declaring the delay ladder took over {self._timeout:g}s"
                ) from None
            except FAILURES as exc:  # not connected, or the connection closed meanwhile
                raise PublishInterrupted(f"could not declare the delay ladder: {exc!r}") from exc
            self._ladder_ready = True

    async def _send_delayed(
        self, channel: AbstractChannel, exchange: str, key: str, body: bytes, props: Any
    ) -> None:
        """Send into the ladder (declared first if this publisher has not yet); if the
        ladder has gone since (an operator deleted it), declare it again and resend once."""
        declared_now = not self._ladder_ready
        if declared_now:
            await self._declare_ladder()
        try:
            await send_confirmed(channel, exchange, key, body, props)
        except Unroutable:
            if declared_now:
                raise
            self._ladder_ready = False
            await self._declare_ladder()
            await send_confirmed(channel, exchange, key, body, props)

    async def publish(
        self,
        message: Message | Publishable,
        *,
        message_id: str | None = None,
        correlation_id: str | None = None,
        headers: Mapping[str, Any] | None = None,
        reply_to: str | None = None,
        delay: float | timedelta | None = None,
        at: datetime | None = None,
        priority: int = 0,
        unique_for: float | None = None,
        unique_key: str | None = None,
        debounce: float | None = None,
    ) -> str:
        """Publish and wait for the broker's confirm; return the ``message_id``.

        ``delay`` (seconds or a timedelta, 0 to 48 days) or ``at`` (a timezone-aware
        datetime; one in the past means now): the message waits in the delay ladder and
        is then delivered to this app's queue only, never earlier, at most about 125 ms
        (its rounding up) plus the broker's hops later (docs/delays.md). A naive
        datetime, a negative delay, both, or a delay beyond the ladder raise
        :class:`~rabbitq.DelayError` before anything is sent. A chain, group or chord
        returns its id (docs/workflows.md). ``priority``: 0 (default, the lowest) to
        N-1 with ``App(priorities=N)`` (docs/control.md, "Priorities").

        ``unique_for=S`` (``unique_key`` default: the message id): a key held by an
        earlier publish within its S-second window is not sent again; that publish's id
        is returned. ``debounce=S, unique_key=K``: handled once, S seconds after K's last
        publish, with its payload. Both keep keys in the app's store (docs/control.md).
        """
        if not isinstance(message, Message):  # a workflow: only its own id= applies
            extra = (message_id, correlation_id, headers, reply_to, at, unique_for, unique_key)
            if delay is not None or debounce is not None or priority or any(extra):
                raise ConfigurationError("publish(workflow) takes no other argument")
            return await message.publish_on(self, self._app)
        if priority:  # a bad priority is refused before any step acts (amqp.lanes)
            check_priority(priority, getattr(self._app, "priorities", 0))
        props = properties.new(
            message, message_id=message_id, correlation_id=correlation_id, headers=headers,
            reply_to=reply_to,
        )  # fmt: skip
        out = outgoing(
            self._app, message, props, delay=delay, at=at, priority=priority, unique_for=unique_for,
            unique_key=unique_key, debounce=debounce,
        )  # fmt: skip
        return await compose(self._app.publish_steps, self._send)(out)  # no steps: _send

    async def _send(self, out: Outgoing, *, timed: bool = True) -> str:
        """The last step: into the delay ladder or to its exchange, confirmed. Not
        ``timed``: the caller bounds the wait for the confirm (publish_many's window)."""
        type_name, props, body, delayed = out.type_name, out.props, out.body, out.delayed
        exchange, routing_key = out.exchange, out.routing_key
        if delayed:
            units, due = ladder.due_in(delay=out.delay, at=out.at)
            exchange, routing_key = ladder.entry(self._app.queue_type, units)
            out.headers.update({
                h.ORIGINAL_EXCHANGE: out.exchange,
                h.ORIGINAL_ROUTING_KEY: out.routing_key,
                ladder.DELAY_TO: out.queue,
                ladder.DUE: ladder.due_header(due),
            })  # fmt: skip
        channel = self._open_channel()
        partitions.stamp(self._app, out.message, props.headers, props.message_id, delayed)
        span = NO_SEND
        if self._app.tracing.enabled:  # writes traceparent into the headers
            span = self._app.tracing.publish(
                out.headers,
                exchange=exchange,
                routing_key=routing_key,
                type_name=type_name,
                message_id=out.message_id,
                correlation_id=props.correlation_id,
                body_size=len(body),
            )

        def send() -> Awaitable[None]:
            if delayed:
                return self._send_delayed(channel, exchange, routing_key, body, props)
            return send_confirmed(channel, exchange, routing_key, body, props)

        try:
            if self._retry_for is None and not timed:
                await send()
            elif self._retry_for is None:
                try:
                    async with asyncio.timeout(self._timeout):
                        await send()
                except TimeoutError:
                    raise no_confirm(self._timeout) from None
            else:
                await within(self._retry_for, send)
        except PublishError as exc:
            span.end(exc)
            self._hooks.publish_failed(self._app.exchange, type_name, error_kind(exc))
            if isinstance(exc, Unroutable) and not delayed:  # say what to run first
                hint = self._app.topology().unroutable(routing_key, self._app.loaded_as)
                raise Unroutable(f"{exc}; {hint}") from exc
            raise
        except BaseException as exc:
            span.end(exc)
            raise
        span.end()
        self._hooks.published(self._app.exchange, type_name)
        return out.message_id

    async def publish_many(
        self,
        messages: Iterable[Message],
        *,
        window: int = DEFAULT_WINDOW,
        headers: Mapping[str, Any] | None = None,
        delay: float | timedelta | None = None,
        at: datetime | None = None,
        priority: int = 0,
        unique_for: float | None = None,
        unique_key: Callable[[Any], str] | None = None,
    ) -> list[str]:
        """Publish with pipelined confirms, ``window`` in flight at a time; ``headers``,
        ``delay``, ``at`` and ``priority`` apply to every message, as in :meth:`publish`.
        ``unique_for=S, unique_key=fn``: each message's key is ``fn(message)``, held as
        :meth:`publish` holds it. No ``debounce``: a batch's messages of one key would
        race to be the last (publish them one by one).

        Returns the message ids in order (a unique key already held: the earlier
        message's id). If any message is not confirmed, the others are still awaited
        and :class:`~rabbitq.errors.PartialPublish` says which; one not confirmed within
        the publisher's ``timeout`` is among them.
        """
        keys = key_function(unique_for, unique_key)  # refused before anything is sent
        if priority:
            check_priority(priority, getattr(self._app, "priorities", 0))
        # No steps (whose waits are not a confirm's) and no retry_for: one timer bounds
        # a window's confirms (sent together), where publish() takes one each.
        plain = self._retry_for is None and not self._app.publish_steps

        def send(message: Message, mid: str) -> Awaitable[str]:
            key = None if keys is None else keys(message)
            if plain and isinstance(message, Message):
                props = properties.new(message, message_id=mid, headers=headers)
                out = outgoing(
                    self._app, message, props, delay=delay, at=at, priority=priority,
                    unique_for=unique_for, unique_key=key, debounce=None,
                )  # fmt: skip
                return self._send(out, timed=False)
            return self.publish(
                message, message_id=mid, headers=headers, delay=delay, at=at,
                priority=priority, unique_for=unique_for, unique_key=key,
            )  # fmt: skip

        if not plain:
            return await pipelined(messages, send, window=window)

        def timed_out(message: Message) -> PublishError:
            self._hooks.publish_failed(self._app.exchange, message.type_name(), "interrupted")
            return no_confirm(self._timeout)

        return await pipelined(
            messages, send, window=window, timeout=self._timeout, timed_out=timed_out
        )
