"""Test your handlers without a broker.

``deliver`` runs a message through exactly the code the worker runs: its stage list
(type resolution, decoding, validation, the app's middleware, the handler with its
timeout, the retry decision), without the stages bound to a broker (limits, breakers,
ordering), and tells you
what the worker would do with it::

    result = await deliver(app, SendEmail(to="a@b.c", subject="hi", body="..."))
    assert result.acked

    result = await deliver(app, SendEmail(...), attempt=2)
    assert result.retried and result.delay == "10s"

    result = await deliver(app, b"not json", type="email.send")
    assert result.dead_lettered and result.reason == "invalid"

A handler that raises :class:`~rabbitq.RetryLater` is ``retried`` with ``deferred`` set,
``delay`` the wait it asked for (rounded up to the delay ladder's 125 ms, ``tier`` None),
and with ``next_attempt == attempt`` unless it counted one.
Handlers with an idempotency store (``rabbitq.effects``) use that real store, so a
second ``deliver`` with the same key is a ``duplicate``; the follow-ups a handler
published with ``ctx.publish`` (and that the worker would send) are in ``published``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from ._amqp import headers as h
from ._worker.batching import Batcher
from ._worker.dispatch import new_job
from ._worker.stages import for_testing
from .app import App
from .cancellation.stage import KnownCancel
from .effects.followups import FollowUp
from .job import add_stage
from .ladder import plan as ladder
from .message import Message, encode
from .outcome import Ack, DeadLetter, Outcome, Requeue, Retry, delay_label

__all__ = ["FakeDelivery", "Result", "deliver", "deliver_batch", "deliver_sync"]


@dataclass(frozen=True, kw_only=True)
class FakeDelivery:
    """A delivery as the worker sees it, made up for a test."""

    body: bytes
    headers: Mapping[str, Any] = field(default_factory=dict)
    type: str | None = None
    routing_key: str | None = None
    exchange: str | None = "rabbitq"
    message_id: str | None = None
    correlation_id: str | None = None
    redelivered: bool | None = False
    timestamp: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Result:
    """What the worker would do: ack, retry (with ``delay`` and ``tier``) or dead-letter."""

    outcome: str  # "ack", "retry", "dead-letter" or "requeue" (a middleware's)
    type_name: str
    attempt: int
    delay: str | None = None  # retry tier label, e.g. "10s" (RetryLater: the wait, "1500ms")
    tier: int | None = None  # 1-based index of the retry tier (None: the delay ladder)
    next_attempt: int | None = None
    deferred: bool = False  # retried because the handler raised RetryLater
    reason: str | None = None  # DLQ reason
    error: str | None = None
    duplicate: bool = False  # acked without running: its key was handled before
    skipped: str | None = None  # acked without running, as this status ("cancelled", ...)
    published: tuple[FollowUp, ...] = ()  # the follow-ups the worker would send

    @property
    def messages(self) -> list[Message]:
        """The follow-up messages, in the order they were published."""
        return [f.message for f in self.published]

    @property
    def acked(self) -> bool:
        """The handler succeeded."""
        return self.outcome == "ack"

    @property
    def cancelled(self) -> bool:
        """It was cancelled before it ran: acked, its handler not run."""
        return self.skipped == "cancelled"

    @property
    def retried(self) -> bool:
        """The message would go to a retry queue."""
        return self.outcome == "retry"

    @property
    def dead_lettered(self) -> bool:
        """The message would go to the DLQ."""
        return self.outcome == "dead-letter"

    @property
    def requeued(self) -> bool:
        """The message would go back to its queue, no attempt used (a middleware's
        ``job.requeue()``)."""
        return self.outcome == "requeue"


async def deliver(
    app: App,
    message: Message | bytes,
    *,
    type: str | None = None,
    attempt: int = 1,
    headers: Mapping[str, Any] | None = None,
    message_id: str | None = None,
    correlation_id: str | None = None,
    redelivered: bool = False,
    timestamp: datetime | None = None,
    cancelled: bool | Literal["running"] = False,
) -> Result:
    """Run one message through ``app``'s handler as the worker would; no broker needed.

    ``message`` is a typed message, or raw bytes (then give ``type``) to test poison input.
    ``message_id`` defaults to a new uuid4 hex; ``""`` delivers one without a message_id.
    ``cancelled=True`` delivers it as cancelled before it arrived (``result.cancelled``,
    the handler not run); ``"running"`` runs it with ``ctx.cancelled`` true. Without it,
    an ``App(cancellable=True)`` asks its real store.
    """
    delivery = _fake(
        app, message, type, attempt, headers, message_id, correlation_id, redelivered, timestamp
    )
    sent: list[FollowUp] = []

    async def send(follow_ups: Sequence[FollowUp]) -> None:
        sent.extend(follow_ups)

    stages = app.delivery_stages
    if cancelled:
        stages = add_stage(stages, KnownCancel(running=cancelled == "running"))
    pipeline = for_testing(
        app.handlers.values(), middleware=app.middleware, send=send, outbox=app.outbox,
        capabilities=stages,
    )  # fmt: skip
    outcome = await pipeline.run(new_job(app.handlers, app.queue, delivery))
    return _result(app, outcome, sent)


def _result(app: App, outcome: Outcome, sent: Sequence[FollowUp] = ()) -> Result:
    decision = outcome.decision
    common: dict[str, Any] = {
        "type_name": outcome.type_name,
        "attempt": outcome.attempt,
        "error": outcome.error,
        "published": tuple(sent),
    }
    if isinstance(decision, Ack):
        return Result(outcome="ack", duplicate=outcome.duplicate, skipped=outcome.skipped, **common)
    if isinstance(decision, Requeue):
        return Result(outcome="requeue", **common)
    if isinstance(decision, Retry):
        handler = app.handlers[outcome.type_name]
        return Result(
            outcome="retry",
            delay=delay_label(ladder.units_of_ms(decision.delay_ms) * ladder.UNIT_MS)
            if decision.ladder
            else decision.label,
            tier=None if decision.ladder else handler.retry.delays_ms.index(decision.delay_ms) + 1,
            next_attempt=decision.next_attempt,
            deferred=decision.deferred,
            **common,
        )
    assert isinstance(decision, DeadLetter)
    return Result(outcome="dead-letter", reason=decision.reason, **common)


def _fake(
    app: App,
    message: Message | bytes,
    type: str | None,
    attempt: int,
    headers: Mapping[str, Any] | None,
    message_id: str | None,
    correlation_id: str | None,
    redelivered: bool,
    timestamp: datetime | None,
) -> FakeDelivery:
    if isinstance(message, Message):
        body = encode(message)
        type = type or message.type_name()
    else:
        body = message
    all_headers = dict(headers or {})
    if attempt != 1:
        all_headers[h.ATTEMPT] = attempt
    return FakeDelivery(
        body=body,
        headers=all_headers,
        type=type,
        routing_key=type,
        exchange=app.exchange,
        # "" stands for a delivery without message_id (another producer's message).
        message_id=uuid.uuid4().hex if message_id is None else message_id,
        correlation_id=correlation_id,
        redelivered=redelivered,
        timestamp=timestamp or datetime.now(UTC),
    )


async def deliver_batch(
    app: App,
    messages: Sequence[Message | bytes],
    *,
    type: str | None = None,
    attempts: Sequence[int] | None = None,
    message_ids: Sequence[str | None] | None = None,
    prefetch: int | None = None,
) -> list[Result]:
    """Deliver ``messages`` to ``app``'s batch handler as the worker would, all at once:
    batches of up to its ``max_size``, duplicates (with an idempotency store) acked before
    the call, the handler's answer split per message; one :class:`Result` per message,
    in order. ``attempts`` and ``message_ids`` (default: 1, a new uuid4 hex) are per
    message; ``prefetch`` (default: the app's) is checked against ``max_size``.
    """
    n = len(messages)
    attempts = list(attempts or [1] * n)
    ids = list(message_ids or [None] * n)
    if len(attempts) != n or len(ids) != n:
        raise ValueError("attempts and message_ids need one item per message")
    batcher = Batcher(app.handlers, app.queue, prefetch=prefetch or app.prefetch)
    pipeline = for_testing(
        app.handlers.values(), middleware=app.middleware, batches=batcher,
        capabilities=app.delivery_stages,
    )  # fmt: skip
    deliveries = [
        _fake(app, m, type, a, None, i, None, False, None)
        for m, a, i in zip(messages, attempts, ids, strict=True)
    ]

    async def run(delivery: FakeDelivery) -> Outcome:
        return await pipeline.run(new_job(app.handlers, app.queue, delivery))

    tasks = [asyncio.create_task(run(d)) for d in deliveries]
    await asyncio.sleep(0)  # every task is in its batch (or has its outcome) now
    batcher.flush_all()
    return [_result(app, o) for o in await asyncio.gather(*tasks)]


def deliver_sync(app: App, message: Message | bytes, **kwargs: Any) -> Result:
    """:func:`deliver` for synchronous tests (runs its own event loop)."""
    return asyncio.run(deliver(app, message, **kwargs))
