"""One delivery in, one outcome out: a short pipeline of named steps.

:func:`process` resolves the type (:func:`resolve_type`), reads the attempt once
(:func:`attempt_of`), then: no handler -> dead letter ``unknown-type``; a body over
``max_body_size`` or one that does not decode -> dead letter ``invalid``
(:func:`_decoded`); else one attempt (:func:`_attempt`: the context, the handler run
once per key, its failure classified by :func:`~rabbitq.worker.outcome.failed`).

No broker I/O happens here: the worker (:mod:`rabbitq.worker.lifecycle`) settles the
outcome with the broker, and ``rabbitq.testing`` runs the very same function without
a broker.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping
from concurrent.futures import Executor
from datetime import datetime
from typing import Any, Protocol

from ..amqp import headers as h
from ..amqp.properties import message_id_of
from ..context import Context
from ..effects.guard import (
    BUSY_ELSEWHERE,
    DUPLICATE,
    RAN,
    Effects,
    Send,
    busy_decision,
    key_of,
    run_once,
)
from ..effects.store import lease_for
from ..errors import ConfigurationError, DecodeError, HandlerNotStarted, PermanentError
from ..handler import Handler
from ..hooks import UNKNOWN
from ..message import decode
from ..retry import INVALID, UNKNOWN_TYPE, DeadLetter, RetryPolicy, not_started, parse_attempt
from ..workflow.chords import ChordStore
from ..workflow.steps import Flow, flow_of
from .batch_run import BatchItem
from .batching import Batcher, run_alone
from .handler_call import call_handler
from .handler_pool import HandlerPool
from .outcome import ACK, Outcome, failed


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


def attempt_of(delivery: Delivery) -> int:
    """The delivery's attempt number (its ``rabbitq-attempt`` header; 1 without one)."""
    return parse_attempt((delivery.headers or {}).get(h.ATTEMPT))


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
    attempt: int | None = None,
    send: Send | None = None,
    outbox: Any = None,
    batches: Batcher | None = None,
    chords: ChordStore | None = None,
) -> Outcome:
    """Run ``delivery`` through its handler and decide ack, retry or dead-letter.

    ``type_name`` and ``attempt`` are :func:`resolve_type`'s and :func:`attempt_of`'s
    answers if the caller already has them.
    ``send`` publishes the handler's follow-ups with confirms after it succeeded;
    ``outbox`` (the app's) takes those published inside ``ctx.transaction()``. With an
    idempotency store the handler runs once per key (:func:`rabbitq.effects.guard.run_once`).
    ``asyncio.CancelledError`` (shutdown) propagates; every other exception is caught.
    A sync handler that found no free thread in a :class:`HandlerPool` did not run: it is
    retried as the same attempt, or (no retry tiers) :class:`HandlerNotStarted` is raised
    for the worker to return the message. A batch handler's message joins its batch in
    ``batches`` (the worker's :class:`~rabbitq.worker.batching.Batcher`; without one, a
    batch of one).
    A step of a chain or a member of a chord (``chords``: the app's chord store, with a
    status store) does its part of the workflow (:mod:`rabbitq.workflow.steps`).
    """
    if type_name is None:
        type_name = resolve_type(delivery, queue)
    if attempt is None:
        attempt = attempt_of(delivery)
    try:
        message_id = functools.partial(message_id_of, delivery, type_name)
        flow = flow_of(delivery.headers or {}, message_id, chords, send or _cannot_send)
    except PermanentError as exc:  # a malformed workflow header: dead-lettered
        return failed(RetryPolicy(), type_name, attempt, exc)
    outcome = await _decide(
        handlers, queue, delivery, executor, type_name, attempt, send, outbox, flow, batches
    )
    if flow is not None and isinstance(outcome.decision, DeadLetter):
        await flow.dead_lettered()
    return outcome


async def _decide(
    handlers: Mapping[str, Handler],
    queue: str,
    delivery: Delivery,
    executor: Executor | HandlerPool | None,
    type_name: str,
    attempt: int,
    send: Send | None,
    outbox: Any,
    flow: Flow | None,
    batches: Batcher | None,
) -> Outcome:
    handler = handlers.get(type_name)
    if handler is None:
        return _unknown_type(type_name, queue, attempt)
    message = _decoded(handler, delivery.body, type_name, attempt)
    if isinstance(message, Outcome):
        return message
    if handler.batch is not None and flow is not None:
        error = PermanentError(f"{type_name} has a batch handler: it cannot be a workflow step")
        return failed(handler.retry, type_name, attempt, error)
    if handler.batch is not None:  # a batch handler: the message waits for its batch
        if batches is None:
            return await run_alone(handler, type_name, queue, BatchItem(message, delivery, attempt))
        return await batches.submit(type_name, message, delivery, attempt)
    return await _attempt(
        handler, message, delivery, queue, type_name, attempt, executor, send, outbox, flow
    )


def _unknown_type(type_name: str, queue: str, attempt: int) -> Outcome:
    error = f"UnknownType: no handler for type {type_name!r} on queue {queue!r}"
    return Outcome(
        DeadLetter(UNKNOWN_TYPE), UNKNOWN, attempt, error=h.truncate_utf8(error, h.MAX_ERROR_BYTES)
    )


def _decoded(handler: Handler, body: bytes, type_name: str, attempt: int) -> Any:
    """The message model, or the ``invalid`` dead letter of a body too large (checked
    before parsing: a huge body must not cost a parse and a model) or not valid."""
    size = len(body)
    if handler.max_body_size is not None and size > handler.max_body_size:
        error = f"BodyTooLarge: body is {size} bytes, above max_body_size {handler.max_body_size}"
        return Outcome(DeadLetter(INVALID), type_name, attempt, error=error)
    try:
        return decode(body, handler.model)
    except DecodeError as exc:
        return Outcome(DeadLetter(INVALID), type_name, attempt, error=h.format_error(exc))


def _context(
    handler: Handler,
    message: Any,
    delivery: Delivery,
    queue: str,
    type_name: str,
    attempt: int,
    outbox: Any,
    flow: Flow | None = None,
) -> Context:
    """The handler's ``ctx``; the idempotency key is the handler's (it may raise)."""
    message_id = message_id_of(delivery, type_name)
    effects = Effects(
        message_id=message_id,
        correlation_id=delivery.correlation_id,
        key=key_of(handler.key, message, message_id),
        store=handler.idempotency,
        outbox=outbox,
    )
    return Context(
        message_id=message_id,
        attempt=attempt,
        max_attempts=handler.retry.attempts,
        redelivered=bool(delivery.redelivered),
        headers=delivery.headers or {},
        correlation_id=delivery.correlation_id,
        queue=queue,
        type=type_name,
        routing_key=delivery.routing_key or "",
        timestamp=delivery.timestamp,
        effects=effects,
        flow=flow,
    )


async def _attempt(
    handler: Handler,
    message: Any,
    delivery: Delivery,
    queue: str,
    type_name: str,
    attempt: int,
    executor: Executor | HandlerPool | None,
    send: Send | None,
    outbox: Any,
    flow: Flow | None = None,
) -> Outcome:
    """One attempt: the context, the handler once per key, and what came of it."""
    started = time.perf_counter()
    try:
        ctx = _context(handler, message, delivery, queue, type_name, attempt, outbox, flow)
        effects = ctx.effects
        assert effects is not None
        call: Any = functools.partial(call_handler, handler, message, ctx, executor)
        if flow is not None:  # keep the result, queue a chain's next step
            call = flow.around(call, effects)
        lease = lease_for(handler.timeout)
        verdict = await run_once(effects, call, send or _cannot_send, lease=lease)
        busy = busy_decision(handler.retry, attempt) if verdict == BUSY_ELSEWHERE else None
        while verdict == BUSY_ELSEWHERE and busy is None:  # no retry tier to wait in
            await asyncio.sleep(BUSY_RECLAIM)
            verdict = await run_once(effects, call, send or _cannot_send, lease=lease)
        if flow is not None and verdict in (RAN, DUPLICATE):
            await flow.succeeded()  # count a chord member; its callback once complete
    except HandlerNotStarted as exc:
        retry = not_started(handler.retry, attempt)
        if retry is None:
            raise
        return Outcome(retry, type_name, attempt, 0.0, error=h.format_error(exc))
    except Exception as failure:
        duration = time.perf_counter() - started
        return failed(handler.retry, type_name, attempt, failure, duration)
    if verdict == DUPLICATE:
        return Outcome(ACK, type_name, attempt, time.perf_counter() - started, duplicate=True)
    if busy is not None and verdict == BUSY_ELSEWHERE:
        error = f"KeyBusy: key {effects.key!r} is being handled by another worker"
        return Outcome(busy, type_name, attempt, error=h.truncate_utf8(error, 1024), busy=True)
    return Outcome(ACK, type_name, attempt, time.perf_counter() - started)
