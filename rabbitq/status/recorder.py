"""The status recorder: a :class:`~rabbitq.tracing.Tracing` observer that turns what the
publisher, the worker and the DLQ tools already report per message into status records.

``App(status=...)`` wraps the app's tracing (none, or OpenTelemetry) in a
:class:`StatusTracing`, which passes every call on to it and queues a record in the
:class:`~rabbitq.status.writer.StatusWriter`: the worker needs no status code of its own.

=================  =====================================================================
record             from
=================  =====================================================================
``published``      a publish (or a handler's follow-up) confirmed by the broker
``received``       a delivery arrived (``attempt``, ``queue``, ``type``)
``started``        its handler began (``attempt``); also for bodies that fail to decode
``succeeded``      the handler returned (``duration`` in seconds); the ack follows
``duplicate``      its idempotency key was handled before: acked, not run
``cancelled``      ``app.cancel`` asked for it before it ran: acked, not run
``superseded``     a later publish of its debounce key came: acked, not run
``deduplicated``   a publish refused, its unique key held (``key``, ``first``: the id
                   the publish returned); written under the refused publish's own id
``retrying``       the retry copy was confirmed (``error``, ``delay``, ``next_attempt``,
                   ``next_at``, ``deferred``)
``dead_lettered``  the DLQ copy was confirmed (``reason``, ``error``)
``requeued``       the delivery went back to its queue unsettled (``error`` if any)
``replayed``       ``rabbitq dlq replay`` sent a confirmed copy (``queue``)
``purged``         ``rabbitq dlq purge`` deleted it (``queue``)
=================  =====================================================================

Every record of a workflow's member carries its group id (``group_id``, from the
message's ``rabbitq-group`` header), and every record of a chord's callback or
``on_failure`` message the group it belongs to (``callback_of``, from
``rabbitq-callback-of``): the headers travel on the message and its retry, DLQ and
replay copies. A purge is told only the message id, so a ``purged`` record has neither;
a group's view finds the member through its other records.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from .._amqp.headers import CALLBACK_OF, GROUP
from ..tracing.base import NO_DELIVERY, NO_SEND, DeliverySpan, SendSpan, Tracing
from .model import (
    DEAD_LETTERED,
    DUPLICATE,
    PUBLISHED,
    PURGED,
    RECEIVED,
    REPLAYED,
    REQUEUED,
    RETRYING,
    STARTED,
    SUCCEEDED,
    Record,
    label_seconds,
    short_error,
)
from .writer import StatusWriter

MAX_GROUP_ID = 255  # characters; a longer header is not a group id rabbitq wrote


def workflow_of(headers: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The group a message is a member of and the group whose callback it is, from its
    headers (pure); None for either that is absent, empty or not a short string."""
    if not headers:
        return None, None
    return _group_id(headers.get(GROUP)), _group_id(headers.get(CALLBACK_OF))


def _group_id(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str) and 0 < len(value) <= MAX_GROUP_ID:
        return value
    return None


class _Sent(SendSpan):
    """A publish or a replay: recorded when the broker confirmed it, at the time it was
    sent (its delivery may come before the confirm)."""

    __slots__ = ("at", "callback_of", "detail", "group", "inner", "message_id", "state", "writer")

    def __init__(
        self,
        writer: StatusWriter,
        message_id: str,
        state: str,
        detail: dict[str, Any],
        inner: SendSpan,
        headers: Mapping[str, Any],
    ) -> None:
        self.writer, self.message_id, self.state = writer, message_id, state
        self.detail, self.inner = detail, inner
        self.group, self.callback_of = workflow_of(headers)
        self.at = time.time()

    def end(self, error: BaseException | None = None) -> None:
        self.inner.end(error)
        if error is None and self.message_id:
            mid, group, callback_of = self.message_id, self.group, self.callback_of
            self.writer.add(Record(mid, self.state, self.at, None, self.detail, group, callback_of))


class _Delivery(DeliverySpan):
    """One delivery: ``received`` now, ``started`` when its handler begins, its outcome
    at settlement."""

    __slots__ = (
        "active", "attempt", "callback_of", "decision", "duration", "group", "inner",
        "is_duplicate", "message_id", "skip", "started", "writer",
    )  # fmt: skip

    def __init__(
        self,
        writer: StatusWriter,
        message_id: str,
        attempt: int,
        inner: DeliverySpan,
        workflow: tuple[str | None, str | None] = (None, None),
    ) -> None:
        self.writer, self.message_id, self.attempt, self.inner = writer, message_id, attempt, inner
        self.group, self.callback_of = workflow
        self.decision: dict[str, Any] = {}
        self.duration: float | None = None
        self.is_duplicate = False
        self.skip: str | None = None
        self.started = 0.0
        self.active: AbstractContextManager[None] | None = None

    def activate(self) -> AbstractContextManager[None]:
        # The span itself is the context manager: a generator-based one costs more than
        # the rest of the recording together.
        return self

    def __enter__(self) -> None:
        self._add(STARTED, time.time(), {})
        if self.inner is not NO_DELIVERY:
            self.active = self.inner.activate()
            self.active.__enter__()
        self.started = time.perf_counter()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.duration = time.perf_counter() - self.started
        if self.active is not None:
            active, self.active = self.active, None
            active.__exit__(kind, exc, tb)

    def copied(self, headers: dict[str, Any]) -> None:
        self.inner.copied(headers)

    def retried(self, delay: str, next_attempt: int, deferred: bool, error: str | None) -> None:
        self.inner.retried(delay, next_attempt, deferred, error)
        self.decision = {
            "delay": delay,
            "next_attempt": next_attempt,
            "deferred": deferred,
            "error": short_error(error),
        }

    def dead_lettered(self, reason: str, error: str | None) -> None:
        self.inner.dead_lettered(reason, error)
        self.decision = {"reason": reason, "error": short_error(error)}

    def duplicate(self) -> None:
        self.inner.duplicate()
        self.is_duplicate = True

    def skipped(self, state: str) -> None:
        self.inner.skipped(state)
        self.skip = state

    def end(self, outcome: str, error: str | None = None) -> None:
        self.inner.end(outcome, error)
        now = time.time()
        detail: Mapping[str, Any]
        if outcome == "success" and self.skip is not None:
            state, detail = self.skip, {}
        elif outcome == "success":
            state = DUPLICATE if self.is_duplicate else SUCCEEDED
            detail = {} if self.duration is None else {"duration": round(self.duration, 6)}
        elif outcome == "retried":
            state, detail = RETRYING, self.decision
            seconds = label_seconds(str(self.decision.get("delay", "")))
            if seconds is not None:
                detail = {**detail, "next_at": round(now + seconds, 3)}
        elif outcome == "dead_lettered":
            state, detail = DEAD_LETTERED, self.decision
        else:
            state, detail = REQUEUED, {} if error is None else {"error": short_error(error)}
        self._add(state, now, detail)

    def _add(self, state: str, at: float, detail: Mapping[str, Any]) -> None:
        mid, group, callback_of = self.message_id, self.group, self.callback_of
        self.writer.add(Record(mid, state, at, self.attempt, detail, group, callback_of))


class StatusTracing(Tracing):
    """Records each message's life in ``writer``, and passes every call on to ``inner``
    (the app's own tracing)."""

    enabled = True

    def __init__(self, writer: StatusWriter, inner: Tracing) -> None:
        self.writer = writer
        self.inner = inner

    def __repr__(self) -> str:
        return f"StatusTracing({self.writer.store!r}, inner={self.inner!r})"

    def publish(
        self,
        headers: dict[str, Any],
        *,
        exchange: str,
        routing_key: str,
        type_name: str,
        message_id: str,
        correlation_id: str | None,
        body_size: int,
    ) -> SendSpan:
        inner = NO_SEND
        if self.inner.enabled:
            inner = self.inner.publish(
                headers,
                exchange=exchange,
                routing_key=routing_key,
                type_name=type_name,
                message_id=message_id,
                correlation_id=correlation_id,
                body_size=body_size,
            )
        return _Sent(self.writer, message_id, PUBLISHED, {"type": type_name}, inner, headers)

    def replay(
        self,
        headers: dict[str, Any],
        *,
        queue: str,
        message_id: str,
        correlation_id: str | None,
    ) -> SendSpan:
        inner = NO_SEND
        if self.inner.enabled:
            inner = self.inner.replay(
                headers, queue=queue, message_id=message_id, correlation_id=correlation_id
            )
        return _Sent(self.writer, message_id, REPLAYED, {"queue": queue}, inner, headers)

    def deliver(
        self,
        headers: Mapping[str, Any],
        *,
        queue: str,
        type_name: str,
        routing_key: str,
        message_id: str,
        correlation_id: str | None,
        attempt: int,
        body_size: int,
        exchange: str = "",
        delivery_tag: int | None = None,
    ) -> DeliverySpan:
        inner = NO_DELIVERY
        if self.inner.enabled:
            inner = self.inner.deliver(
                headers,
                queue=queue,
                type_name=type_name,
                routing_key=routing_key,
                message_id=message_id,
                correlation_id=correlation_id,
                attempt=attempt,
                body_size=body_size,
                exchange=exchange,
                delivery_tag=delivery_tag,
            )
        detail = {"queue": queue, "type": type_name}
        workflow = workflow_of(headers)
        self.writer.add(Record(message_id, RECEIVED, time.time(), attempt, detail, *workflow))
        return _Delivery(self.writer, message_id, attempt, inner, workflow)

    def purged(self, *, queue: str, message_id: str) -> None:
        self.inner.purged(queue=queue, message_id=message_id)
        if message_id:
            self.writer.add(Record(message_id, PURGED, time.time(), None, {"queue": queue}))

    async def flush(self) -> None:
        await self.writer.flush()
        await self.inner.flush()
