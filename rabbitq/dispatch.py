"""One delivery in, one decision out: resolve the type, decode, run the handler, classify.

No broker I/O happens here: the worker (``consumer.py``) settles the decision with the
broker, and ``rabbitq.testing`` runs the very same function without a broker.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import Coroutine, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from . import headers as h
from .app import Context, Handler
from .codec import decode
from .errors import DecodeError, PermanentError
from .retry import INVALID, UNKNOWN_TYPE, DeadLetter, Retry, after_failure, parse_attempt

UNKNOWN = "unknown"  # the type label of a delivery whose type cannot be trusted


class Delivery(Protocol):
    """The fields of a delivery that rabbitq reads (aio-pika's IncomingMessage has them)."""

    @property
    def body(self) -> bytes: ...
    @property
    def headers(self) -> Mapping[str, Any]: ...
    @property
    def type(self) -> str | None: ...
    @property
    def routing_key(self) -> str | None: ...
    @property
    def exchange(self) -> str | None: ...
    @property
    def message_id(self) -> str | None: ...
    @property
    def correlation_id(self) -> str | None: ...
    @property
    def redelivered(self) -> bool | None: ...
    @property
    def timestamp(self) -> datetime | None: ...


class Ack:
    """The handler succeeded: acknowledge the delivery."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ACK"


ACK = Ack()


@dataclass(frozen=True, slots=True)
class Outcome:
    """The decision for one delivery and what the copies and metrics need to know."""

    decision: Ack | Retry | DeadLetter
    type_name: str
    attempt: int
    duration: float = 0.0
    error: str | None = None
    traceback: str | None = None  # formatted for dead letters only


def message_id_of(delivery: Delivery, type_name: str) -> str:
    """The delivery's ``message_id``, or one derived from what every copy of it keeps.

    A message from another producer may have none. Its id is then derived from the type
    name, body and timestamp (unchanged on retry copies), so that it is the same on every
    attempt and can serve as an idempotency key; it starts with ``derived-``.
    """
    if delivery.message_id:
        return delivery.message_id
    digest = hashlib.sha256(type_name.encode())
    digest.update(b"\0" + delivery.body + b"\0")
    if delivery.timestamp is not None:
        digest.update(delivery.timestamp.isoformat().encode())
    return "derived-" + digest.hexdigest()[:32]


def resolve_type(delivery: Delivery, queue: str) -> str:
    """The type name: the ``type`` property, else the routing key (other producers)."""
    if delivery.type:
        return delivery.type
    key = delivery.routing_key or ""
    if key == queue:
        # Published straight to the queue (or back from a retry queue) without ``type``:
        # the queue's name says nothing, the original routing key may.
        return h.text_header(delivery.headers or {}, h.ORIGINAL_ROUTING_KEY) or key
    return key


async def _call(handler: Handler, message: Any, ctx: Context, executor: Executor | None) -> None:
    args = (message, ctx) if handler.wants_context else (message,)
    if handler.is_async:
        await handler.fn(*args)
    else:
        loop = asyncio.get_running_loop()
        # A sync handler that outlives its timeout cannot be stopped: its thread runs
        # on, but the message is settled as failed and the slot is freed.
        await loop.run_in_executor(executor, functools.partial(handler.fn, *args))


async def process(
    handlers: Mapping[str, Handler],
    queue: str,
    delivery: Delivery,
    executor: Executor | None = None,
    type_name: str | None = None,
) -> Outcome:
    """Run ``delivery`` through its handler and decide ack, retry or dead-letter.

    ``type_name`` is :func:`resolve_type`'s answer if the caller already has it.
    ``asyncio.CancelledError`` (shutdown) propagates; every other exception is caught.
    """
    if type_name is None:
        type_name = resolve_type(delivery, queue)
    headers = delivery.headers or {}
    attempt = parse_attempt(headers.get(h.ATTEMPT))
    handler = handlers.get(type_name)
    if handler is None:
        return Outcome(
            DeadLetter(UNKNOWN_TYPE),
            UNKNOWN,
            attempt,
            error=h.truncate_utf8(
                f"UnknownType: no handler for type {type_name!r} on queue {queue!r}",
                h.MAX_ERROR_BYTES,
            ),
        )
    size = len(delivery.body)
    if handler.max_body_size is not None and size > handler.max_body_size:
        # Checked before parsing: a huge body must not cost a parse and a model.
        error = f"BodyTooLarge: body is {size} bytes, above max_body_size {handler.max_body_size}"
        return Outcome(DeadLetter(INVALID), type_name, attempt, error=error)
    try:
        message = decode(delivery.body, handler.model)
    except DecodeError as exc:
        return Outcome(DeadLetter(INVALID), type_name, attempt, error=h.format_error(exc))

    ctx = Context(
        message_id=message_id_of(delivery, type_name),
        attempt=attempt,
        max_attempts=handler.retry.attempts,
        redelivered=bool(delivery.redelivered),
        headers=headers,
        correlation_id=delivery.correlation_id,
        queue=queue,
        type=type_name,
        routing_key=delivery.routing_key or "",
        timestamp=delivery.timestamp,
    )
    started = time.perf_counter()
    try:
        if handler.timeout is None:
            await _call(handler, message, ctx, executor)
        else:
            await _call_within(handler.timeout, _call(handler, message, ctx, executor))
    except Exception as failure:
        duration = time.perf_counter() - started
        decision = after_failure(
            handler.retry, attempt, permanent=isinstance(failure, PermanentError)
        )
        return Outcome(
            decision,
            type_name,
            attempt,
            duration,
            error=h.format_error(failure),
            # Only the DLQ copy carries it, and formatting one costs more than the rest
            # of a retry (it reads the source lines of every frame).
            traceback=h.format_traceback(failure) if isinstance(decision, DeadLetter) else None,
        )
    return Outcome(ACK, type_name, attempt, time.perf_counter() - started)


class HandlerTimeout(Exception):
    """A handler ran past its ``timeout`` (recorded as the error of the failed attempt)."""


class _Expiry:
    """Cancels the task when called (by the loop's timer) and remembers that it did."""

    __slots__ = ("expired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.expired = False

    def __call__(self) -> None:
        self.expired = True
        self.task.cancel()


async def _call_within(timeout: float, call: Coroutine[Any, Any, None]) -> None:
    """Await ``call``; past ``timeout`` seconds cancel it and raise HandlerTimeout.

    What ``asyncio.timeout`` does, for a fraction of its cost per message: one timer
    handle, no context manager. A cancellation that is not ours (shutdown) propagates.
    """
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    cancelling = task.cancelling()
    expiry = _Expiry(task)
    timer = loop.call_at(loop.time() + timeout, expiry)
    try:
        await call
    except asyncio.CancelledError:
        if expiry.expired and task.uncancel() <= cancelling:
            raise HandlerTimeout(f"handler exceeded its timeout of {timeout:g}s") from None
        raise
    else:
        if expiry.expired:  # the handler swallowed our cancellation and returned
            task.uncancel()
    finally:
        timer.cancel()
