"""One delivery in, one decision out: resolve the type, decode, run the handler, classify.

No broker I/O happens here: the worker (:mod:`rabbitq.worker.lifecycle`) settles the
decision with the broker, and ``rabbitq.testing`` runs the very same function without
a broker.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from collections.abc import Coroutine, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from .. import headers as h
from ..amqp.properties import message_id_of
from ..app import Context, Handler
from ..codec import decode
from ..effects.guard import (
    BUSY_ELSEWHERE,
    DUPLICATE,
    Effects,
    Send,
    busy_decision,
    key_of,
    run_once,
)
from ..effects.store import lease_for
from ..errors import ConfigurationError, DecodeError, HandlerNotStarted, HandlerTimeout
from ..hooks import UNKNOWN
from ..retry import (
    INVALID,
    UNKNOWN_TYPE,
    DeadLetter,
    Retry,
    after_exception,
    not_started,
    parse_attempt,
)
from ..tracing.base import DeliverySpan, Tracing
from .handler_pool import Expired, HandlerPool, NotStarted

log = logging.getLogger("rabbitq.worker")


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
    duplicate: bool = False  # its key was handled before: acked, the handler not run
    busy: bool = False  # its key is in progress elsewhere: a retry copy, no attempt used


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


async def _call(
    handler: Handler, message: Any, ctx: Context, executor: Executor | HandlerPool | None
) -> None:
    args = (message, ctx) if handler.wants_context else (message,)
    if handler.is_async:
        await handler.fn(*args)
    elif isinstance(executor, HandlerPool):
        # The pool applies the timeout from the moment the handler starts, and keeps
        # threads free for other handlers when one hangs (see handler_pool).
        try:
            await executor.run(
                functools.partial(handler.fn, *args), timeout=handler.timeout, name=ctx.type
            )
        except Expired as exc:
            raise HandlerTimeout(str(exc)) from None
        except NotStarted as exc:
            raise HandlerNotStarted(str(exc)) from None
    else:
        loop = asyncio.get_running_loop()
        # A sync handler that outlives its timeout cannot be stopped: its thread runs
        # on, but the message is settled as failed and the slot is freed. The thread runs
        # in a copy of this context, so a tracing span current here is current there too.
        run = contextvars.copy_context().run
        await loop.run_in_executor(executor, functools.partial(run, handler.fn, *args))


async def _run(
    handler: Handler, message: Any, ctx: Context, executor: Executor | HandlerPool | None
) -> None:
    # A sync handler on a HandlerPool: the pool applies the timeout from its start.
    if handler.timeout is None or (not handler.is_async and isinstance(executor, HandlerPool)):
        await _call(handler, message, ctx, executor)
    else:
        await _call_within(handler.timeout, _call(handler, message, ctx, executor))


async def _cannot_send(follow_ups: Any) -> None:
    if follow_ups:
        raise ConfigurationError("ctx.publish() needs a worker (or rabbitq.testing) to send")


# A key busy elsewhere, for a handler without retry tiers, is claimed again this often.
BUSY_RECLAIM = 1.0


async def process(
    handlers: Mapping[str, Handler],
    queue: str,
    delivery: Delivery,
    executor: Executor | HandlerPool | None = None,
    type_name: str | None = None,
    *,
    send: Send | None = None,
    outbox: Any = None,
) -> Outcome:
    """Run ``delivery`` through its handler and decide ack, retry or dead-letter.

    ``type_name`` is :func:`resolve_type`'s answer if the caller already has it.
    ``send`` publishes the handler's follow-ups with confirms after it succeeded;
    ``outbox`` (the app's) takes those published inside ``ctx.transaction()``. With an
    idempotency store the handler runs once per key (:func:`rabbitq.effects.guard.run_once`).
    ``asyncio.CancelledError`` (shutdown) propagates; every other exception is caught.
    A sync handler that found no free thread in a :class:`HandlerPool` did not run: it is
    retried as the same attempt, or (no retry tiers) :class:`HandlerNotStarted` is raised
    for the worker to return the message.
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

    message_id = message_id_of(delivery, type_name)
    started = time.perf_counter()
    try:
        effects = Effects(
            message_id=message_id,
            correlation_id=delivery.correlation_id,
            key=key_of(handler.key, message, message_id),
            store=handler.idempotency,
            outbox=outbox,
        )
        ctx = Context(
            message_id=message_id,
            attempt=attempt,
            max_attempts=handler.retry.attempts,
            redelivered=bool(delivery.redelivered),
            headers=headers,
            correlation_id=delivery.correlation_id,
            queue=queue,
            type=type_name,
            routing_key=delivery.routing_key or "",
            timestamp=delivery.timestamp,
            effects=effects,
        )
        call = functools.partial(_run, handler, message, ctx, executor)
        lease = lease_for(handler.timeout)
        verdict = await run_once(effects, call, send or _cannot_send, lease=lease)
        busy = busy_decision(handler.retry, attempt) if verdict == BUSY_ELSEWHERE else None
        while verdict == BUSY_ELSEWHERE and busy is None:  # no retry tier to wait in
            await asyncio.sleep(BUSY_RECLAIM)
            verdict = await run_once(effects, call, send or _cannot_send, lease=lease)
    except HandlerNotStarted as exc:
        retry = not_started(handler.retry, attempt)
        if retry is None:
            raise
        return Outcome(retry, type_name, attempt, 0.0, error=h.format_error(exc))
    except Exception as failure:
        duration = time.perf_counter() - started
        decision = after_exception(handler.retry, attempt, failure)
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
    if verdict == DUPLICATE:
        return Outcome(ACK, type_name, attempt, time.perf_counter() - started, duplicate=True)
    if busy is not None and verdict == BUSY_ELSEWHERE:
        error = f"KeyBusy: key {effects.key!r} is being handled by another worker"
        return Outcome(busy, type_name, attempt, error=h.truncate_utf8(error, 1024), busy=True)
    return Outcome(ACK, type_name, attempt, time.perf_counter() - started)


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


def limit_failure(
    handlers: Mapping[str, Handler], delivery: Delivery, type_name: str, exc: Exception
) -> Outcome:
    """The outcome when a handler's limiter could not be asked (a shared one is down):
    a failed attempt, retried or dead-lettered as any other."""
    attempt = parse_attempt((delivery.headers or {}).get(h.ATTEMPT))
    decision = after_exception(handlers[type_name].retry, attempt, exc)
    return Outcome(
        decision,
        type_name,
        attempt,
        error=h.format_error(exc),
        traceback=h.format_traceback(exc) if isinstance(decision, DeadLetter) else None,
    )


def trace_delivery(
    tracing: Tracing, delivery: Delivery, queue: str, type_name: str
) -> DeliverySpan:
    """The tracing span of one delivery, from what its headers and properties say."""
    headers = delivery.headers or {}
    return tracing.deliver(
        headers,
        queue=queue,
        type_name=type_name,
        routing_key=delivery.routing_key or "",
        message_id=message_id_of(delivery, type_name),
        correlation_id=delivery.correlation_id,
        attempt=parse_attempt(headers.get(h.ATTEMPT)),
        body_size=len(delivery.body),
    )


async def close_stores(handlers: Mapping[str, Handler], tracing: Tracing | None = None) -> None:
    """Close the idempotency stores of ``handlers``, each once (when the worker stops),
    and flush ``tracing`` (the status records still queued, with ``App(status=...)``).

    A store opens its connections on first use and keeps them until closed: left open,
    a Redis or PostgreSQL pool outlives the worker (in a test suite, its sockets are
    reported as unclosed wherever the garbage collector meets them). A closed store
    opens again on its next use. A failure to close is logged: the worker stops anyway.
    """
    stores = {id(h.idempotency): h.idempotency for h in handlers.values()}
    for store in stores.values():
        if store is None:
            continue
        try:
            await store.close()
        except Exception as exc:
            log.warning("could not close %r: %s", store, exc)
    if tracing is not None:
        await tracing.flush()
