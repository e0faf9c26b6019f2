"""What a handler may know about its delivery besides the message: :class:`Context`,
passed as the handler's second argument when it takes one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from .errors import ConfigurationError
from .message import Message

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from .effects.guard import Effects


class Flow(Protocol):
    """What a context reads of its delivery's workflow part
    (:class:`rabbitq.workflow.steps.Flow`)."""

    async def results(self) -> list[Any]:
        """A chord callback's members' results, by index."""
        ...


class CancelFlag:
    """Set once the message being handled was cancelled (``app.cancel``): what
    :attr:`Context.cancelled` reads. A plain attribute, so a sync handler's thread reads
    it as cheaply as an async one."""

    __slots__ = ("is_set",)

    def __init__(self, is_set: bool = False) -> None:
        self.is_set = is_set

    def set(self) -> None:
        """The message was cancelled while its handler ran."""
        self.is_set = True


@dataclass(frozen=True, kw_only=True, slots=True)
class Context:
    """What a handler may want to know about the delivery besides the message.

    ``message_id`` is the AMQP ``message_id`` property. A message from another producer
    that has none gets one derived from its type, body and timestamp (``derived-…``),
    the same on every attempt. ``idempotency_key`` is the handler's ``key(message)``,
    else ``message_id``: pass it to an external provider as its idempotency key.
    ``publish`` and ``transaction`` are the delivery's effects (docs/effects.md).
    ``cancelled`` turns true once the message was cancelled while its handler runs
    (``App(cancellable=True)``; docs/control.md).
    """

    message_id: str
    attempt: int
    max_attempts: int
    redelivered: bool
    headers: Mapping[str, Any]
    correlation_id: str | None
    queue: str
    type: str
    routing_key: str
    timestamp: datetime | None
    effects: Effects | None = None
    flow: Flow | None = None
    cancel_flag: CancelFlag | None = None

    @property
    def cancelled(self) -> bool:
        """True once ``app.cancel(message_id)`` was called for this message (seen within
        the app's cancel poll interval, 1 s by default): stop early if you can."""
        return self.cancel_flag is not None and self.cancel_flag.is_set

    @property
    def idempotency_key(self) -> str:
        """The key this delivery is handled once under."""
        return self.effects.key if self.effects is not None else self.message_id

    async def publish(
        self,
        message: Message,
        *,
        headers: Mapping[str, Any] | None = None,
        delay: float | timedelta | None = None,
        priority: int = 0,
        unique_for: float | None = None,
    ) -> str:
        """Publish a follow-up: sent with confirms only if the handler succeeds, before
        the delivery is acked; return its ``message_id``. It crosses the app's publish
        steps as ``publish`` does (encryption, large payloads, partition key, priority
        lanes), and takes ``delay``, ``priority`` and ``unique_for`` as it does. While
        :meth:`transaction` is open (until the handler returns) with an
        :class:`~rabbitq.effects.Outbox`, it is an outbox row of that transaction
        (without those three keywords); without one it is confirmed before the commit.
        """
        if self.effects is None:
            raise ConfigurationError("ctx.publish() works in a handler run by rabbitq")
        return await self.effects.publish(
            message, headers=headers, delay=delay, priority=priority, unique_for=unique_for
        )

    async def chord_results(self) -> list[Any]:
        """In a chord's callback: what each member's handler returned, in the order of
        the chord's members (None for one that returned nothing); at most 1000 members of
        16 KiB of JSON each (docs/workflows.md). Needs ``App(status=...)``."""
        if self.flow is None:
            raise ConfigurationError("ctx.chord_results() works in a chord's callback")
        return await self.flow.results()

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """The idempotency store's connection in a transaction that also marks this
        delivery's key done (a :class:`~rabbitq.effects.PostgresStore` only). It commits
        when the handler returns, not at the end of the block: a step after the block
        that fails rolls it back, and the retry runs the whole handler."""
        if self.effects is None:
            raise ConfigurationError("ctx.transaction() works in a handler run by rabbitq")
        return self.effects.transaction()
